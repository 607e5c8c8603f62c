//! Which of a ring's data pages a mapping has faulted in.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::page_size;

/// The data area's pages, each faulted in the first time a read reaches
/// it (`MADV_POPULATE_READ`, one call for the pages a read finds new).
/// Linux before 6.14 maps a ring's pages one fault at a time as they are
/// first read; mapping them all at `mmap` made a 64-vCPU start 8 s slower
/// (4 MiB rings, mapped by the writer and the merger), though a ring that
/// receives little is never read whole. Faulting in a sixty-fourth of the
/// ring ahead of the reads (16 pages of a 4 MiB ring) cost a 16-vCPU
/// guest's merger 256 faults in its first round, where the rings held a
/// page each: a fault there costs about 0.1 ms.
pub(super) struct MappedPages {
    page: usize,
    /// One bit a page, set once it is faulted in.
    done: Vec<AtomicU64>,
    /// Pages not faulted in yet: none left, a read asks nothing.
    left: AtomicUsize,
}

impl MappedPages {
    pub(super) fn new(data_size: usize) -> MappedPages {
        let page = page_size();
        let pages = data_size.div_ceil(page);
        MappedPages {
            page,
            done: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            left: AtomicUsize::new(pages),
        }
    }

    fn is_done(&self, page: usize) -> bool {
        self.done[page / 64].load(Ordering::Relaxed) & (1 << (page % 64)) != 0
    }

    /// The byte range of the pages `[offset, offset + len)` touches that
    /// are not faulted in yet, from the first such page to the last.
    pub(super) fn missing(&self, offset: usize, len: usize) -> Option<(usize, usize)> {
        if len == 0 || self.left.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let end = (offset + len - 1) / self.page + 1;
        let first = (offset / self.page..end).find(|&p| !self.is_done(p))?;
        let last = (first..end).rev().find(|&p| !self.is_done(p))?;
        Some((first * self.page, (last + 1 - first) * self.page))
    }

    /// Marks the pages of `[offset, offset + len)` faulted in; all of
    /// them where the kernel cannot populate (before 5.14) or need not
    /// (since 6.14 a ring is mapped whole at `mmap`, as a PFN map).
    pub(super) fn mark(&self, range: Option<(usize, usize)>) {
        let Some((offset, len)) = range else {
            self.left.store(0, Ordering::Relaxed);
            return;
        };
        let pages = offset / self.page..(offset + len).div_ceil(self.page);
        for page in pages.filter(|&p| p / 64 < self.done.len()) {
            let bit = 1 << (page % 64);
            // Only the caller that sets a page's bit counts it.
            if self.done[page / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                self.left.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MappedPages;

    #[test]
    fn a_read_faults_in_only_the_pages_it_reaches_once() {
        let page = crate::ring::page_size();
        let pages = MappedPages::new(1024 * page);
        assert_eq!(pages.missing(0, 8), Some((0, page)));
        pages.mark(pages.missing(0, 8));
        assert_eq!(pages.missing(100, page - 100), None);
        // A read over a done page into two new ones takes both at once.
        assert_eq!(pages.missing(100, 2 * page), Some((page, 2 * page)));
        pages.mark(Some((page, 2 * page)));
        // New pages on both sides of done ones: one call from the first
        // to the last.
        pages.mark(Some((5 * page, page)));
        assert_eq!(
            pages.missing(4 * page, 3 * page),
            Some((4 * page, 3 * page))
        );
        assert_eq!(pages.missing(5 * page + 8, 8), None);
        // The last page, then a kernel that cannot populate.
        assert_eq!(pages.missing(1024 * page - 8, 8), Some((1023 * page, page)));
        pages.mark(None);
        assert_eq!(pages.missing(7 * page, 40 * page), None);
    }

    #[test]
    fn a_ring_read_whole_asks_no_more() {
        let page = crate::ring::page_size();
        let pages = MappedPages::new(8 * page);
        pages.mark(Some((0, 6 * page)));
        assert_eq!(pages.missing(0, 8 * page), Some((6 * page, 2 * page)));
        pages.mark(pages.missing(0, 8 * page));
        assert_eq!(pages.left.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(pages.missing(3 * page, 4 * page), None);
    }
}
