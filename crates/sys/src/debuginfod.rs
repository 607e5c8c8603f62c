//! A binary's debug info from the debuginfod servers in
//! `$DEBUGINFOD_URLS`, through elfutils' `libdebuginfod` as perf fetches
//! it: the library keeps its own cache, follows the servers' redirects
//! and speaks HTTPS with the system's certificates. It is loaded when
//! asked for (`dlopen`), so a host without it (Debian: `libdebuginfod1`)
//! runs shardrec all the same and is told what is missing.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The library's soname.
pub const LIBRARY: &str = "libdebuginfod.so.1";

type Begin = unsafe extern "C" fn() -> *mut c_void;
type FindDebuginfo = unsafe extern "C" fn(*mut c_void, *const u8, c_int, *mut *mut c_char) -> c_int;
type End = unsafe extern "C" fn(*mut c_void);

/// A debuginfod client: the library loaded and one of its clients.
pub struct Debuginfod {
    library: *mut c_void,
    client: *mut c_void,
    find_debuginfo: FindDebuginfo,
    end: End,
}

impl Debuginfod {
    /// Loads the library and begins a client; the error says what is
    /// missing.
    pub fn open() -> Result<Debuginfod, String> {
        let name = CString::new(LIBRARY).expect("no NUL in the name");
        // SAFETY: a NUL-terminated name; the handle is checked and closed
        // in Drop (or below, on failure).
        let library = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if library.is_null() {
            return Err(format!(
                "{LIBRARY} is not installed (Debian: libdebuginfod1)"
            ));
        }
        let symbol = |name: &CStr| {
            // SAFETY: a live handle and a NUL-terminated name.
            let address = unsafe { libc::dlsym(library, name.as_ptr()) };
            (!address.is_null()).then_some(address)
        };
        let (Some(begin), Some(find), Some(end)) = (
            symbol(c"debuginfod_begin"),
            symbol(c"debuginfod_find_debuginfo"),
            symbol(c"debuginfod_end"),
        ) else {
            // SAFETY: the handle dlopen returned, closed once.
            unsafe { libc::dlclose(library) };
            return Err(format!("{LIBRARY} lacks the debuginfod_* functions"));
        };
        // SAFETY: the symbols are elfutils' functions of these signatures
        // (debuginfod.h), which have not changed since the library's first
        // release.
        let (begin, find_debuginfo, end) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Begin>(begin),
                std::mem::transmute::<*mut c_void, FindDebuginfo>(find),
                std::mem::transmute::<*mut c_void, End>(end),
            )
        };
        // SAFETY: takes no argument; a null result is checked.
        let client = unsafe { begin() };
        if client.is_null() {
            // SAFETY: as above.
            unsafe { libc::dlclose(library) };
            return Err("debuginfod_begin failed".into());
        }
        Ok(Debuginfod {
            library,
            client,
            find_debuginfo,
            end,
        })
    }

    /// The path of the debug info of the binary with `build_id`, in the
    /// library's cache (fetched if it was not there); the error is the
    /// library's (ENOENT: no server has it; ENOSYS: no server is set).
    pub fn find_debuginfo(&mut self, build_id: &[u8]) -> std::io::Result<PathBuf> {
        let mut path: *mut c_char = std::ptr::null_mut();
        let length = c_int::try_from(build_id.len()).map_err(std::io::Error::other)?;
        // SAFETY: a live client, a build id of `length` bytes (a nonzero
        // length means raw bytes, not hex), and a place for the path the
        // library allocates.
        let fd =
            unsafe { (self.find_debuginfo)(self.client, build_id.as_ptr(), length, &mut path) };
        if fd < 0 {
            return Err(std::io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: a descriptor the library opened for us; the path names
        // the file.
        unsafe { libc::close(fd) };
        if path.is_null() {
            return Err(std::io::Error::other("no path for the debug info"));
        }
        // SAFETY: a NUL-terminated string the library allocated with
        // malloc, copied before it is freed.
        let found = unsafe {
            let found = PathBuf::from(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
            libc::free(path.cast());
            found
        };
        Ok(found)
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        // SAFETY: the client and the handle are live and released once.
        unsafe {
            (self.end)(self.client);
            libc::dlclose(self.library);
        }
    }
}
