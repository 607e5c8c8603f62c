//! A merge that frees the shards as it goes (`merge --consume`, and the
//! recorder's own merge): the same perf.data as a merge that keeps them,
//! shards freed behind it, and one interrupted midway completed by a later
//! merge with every record.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;

use common::*;

/// Bytes of `dir`'s CPU shards: (their length, what the disk holds).
fn shard_sizes(dir: &Path) -> (u64, u64) {
    let list = shard_list(dir);
    (
        list.iter().map(|s| s.1).sum(),
        list.iter().map(|s| s.2).sum(),
    )
}

/// Each CPU shard's name, length and bytes held on disk.
fn shard_list(dir: &Path) -> Vec<(String, u64, u64)> {
    let mut list: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap(),
            )
        })
        .filter(|(name, _)| name.starts_with("cpu") && name.ends_with(".shard"))
        .map(|(name, m)| (name, m.len(), 512 * m.blocks()))
        .collect();
    list.sort();
    list
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn merge(dir: &Path, out: &Path, extra: &[&str], faults: Option<&str>) -> Output {
    let mut command = shardrec();
    command
        .args(["merge", "-N", "--slice-size", "64K"])
        .args(extra)
        .arg(dir)
        .arg("-o")
        .arg(out);
    if let Some(faults) = faults {
        command.env("SHARDREC_FAULTS", faults);
    }
    run(command)
}

fn script(file: &Path) -> Vec<u8> {
    let output = perf(&["script", "-F", "comm,tid,cpu,time,ip,sym"], file);
    assert_no_complaint(&output, "perf script");
    output.stdout
}

#[test]
fn a_merge_that_frees_the_shards_writes_what_one_that_keeps_them_writes() {
    let Some((_serial, scratch)) = recording_test("consume") else {
        return;
    };
    record(
        &scratch,
        &[
            "-a",
            "--call-graph",
            "dwarf,4096",
            "-F",
            "2000",
            "--",
            load(),
            "spin",
            "1",
        ],
    );
    let kept = scratch.0.join("kept.data");
    let output = merge(&scratch.shards(), &kept, &[], None);
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let slices: u64 = stderr
        .split("merged in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(slices > 20, "{slices} slices");
    let whole = std::fs::read(&kept).unwrap();
    let (len, held) = shard_sizes(&scratch.shards());
    assert!(len > 2 << 20 && held >= len, "{len} bytes, {held} on disk");

    // Freed as it goes, on one thread and on two: the same bytes.
    for threads in ["1", "2"] {
        let dir = scratch.0.join(format!("consumed-{threads}.shards"));
        copy_dir(&scratch.shards(), &dir);
        let out = scratch.0.join(format!("consumed-{threads}.data"));
        let output = merge(&dir, &out, &["--consume", "--threads", threads], None);
        assert!(output.status.success(), "{output:?}");
        assert!(std::fs::read(&out).unwrap() == whole, "{threads} threads");
        let (len_after, held_after) = shard_sizes(&dir);
        assert_eq!(len_after, len, "the shards keep their length");
        assert!(
            held_after < held / 4,
            "{threads} threads: {held_after} of {held} bytes still held after the merge, by shard {:?}: {}",
            shard_list(&dir),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!dir.join("merged.prefix").exists());
        assert!(!dir.join("merged.partial").exists());
        // Merged again: refused, naming what the shards went into.
        let output = merge(&dir, &scratch.0.join("spent.data"), &[], None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(255), "{stderr}");
        assert!(
            stderr.contains("the shards hold nothing more")
                && stderr.contains(&out.display().to_string()),
            "{stderr}"
        );
    }

    // Interrupted by a failed write midway: the error says how to go on,
    // and the next merge of the directory writes every record.
    let dir = scratch.0.join("interrupted.shards");
    copy_dir(&scratch.shards(), &dir);
    let out = scratch.0.join("interrupted.data");
    // A slice of 64 KiB is one write of its records.
    let fault = format!("merge.slice=EIO@{}", slices / 2);
    let output = merge(&dir, &out, &["--consume", "--threads", "1"], Some(&fault));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    assert!(
        stderr.contains("freed the first part of the shards")
            && stderr.contains("merged.partial")
            && stderr.contains(&format!("shardrec merge {} -o FILE", dir.display())),
        "{stderr}"
    );
    assert!(!out.exists());
    let (_, held_midway) = shard_sizes(&dir);
    assert!(
        held_midway < held,
        "nothing was freed: {held_midway} of {held}"
    );
    // A time window of the freed shards is refused until the merge is
    // complete.
    let output = merge(&dir, &out, &["--time", "0%-50%"], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    assert!(stderr.contains("complete it first"), "{stderr}");
    let output = merge(&dir, &out, &[], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("resumed: the first"), "{stderr}");
    assert!(script(&out) == script(&kept));
    // The build ids of the binaries hit before the interruption, and the
    // first sample's time, come through too.
    const HEADER_BUILD_ID: usize = 2;
    const HEADER_SAMPLE_TIME: usize = 21;
    for feature in [HEADER_BUILD_ID, HEADER_SAMPLE_TIME] {
        assert_eq!(
            feature_section(&out, feature),
            feature_section(&kept, feature),
            "feature {feature}"
        );
    }
    assert_eq!(
        samples_by_linux_perf_data(&out),
        samples_by_linux_perf_data(&kept)
    );
    // Merged again: the same again (the directory is left as it was).
    let again = scratch.0.join("again.data");
    assert!(merge(&dir, &again, &[], None).status.success());
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&out).unwrap());

    // Damaged progress: one clear line each, never a panic.
    let refused = |what: &str, expected: &str| {
        let output = merge(&dir, &scratch.0.join("damaged.data"), &[], None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(255), "{what}: {stderr}");
        assert!(stderr.contains(expected), "{what}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    };
    let partial = dir.join("merged.partial");
    let whole_partial = std::fs::read(&partial).unwrap();
    std::fs::write(&partial, &whole_partial[..100]).unwrap();
    refused(
        "merged.partial cut",
        "merged.partial: an interrupted merge wrote",
    );
    std::fs::write(&partial, &whole_partial).unwrap();
    std::fs::write(dir.join("merged.prefix"), b"\x93garbage").unwrap();
    refused(
        "merged.prefix damaged",
        "merged.prefix: not the progress of a shardrec merge",
    );
}

#[test]
fn the_recorders_merge_interrupted_after_freeing_shards_is_completed_by_a_merge() {
    let Some((_serial, scratch)) = recording_test("consume-record") else {
        return;
    };
    // 160 MB, however fast this host samples (--max-size stops it). The
    // live merger, which frees the shards behind its checkpoints, fails
    // at its second; the recorder's merge at the stop, which completes its
    // output, fails at its first slice.
    let mut command = shardrec();
    command
        .env(
            "SHARDREC_FAULTS",
            "merge.checkpoint=EIO@2,merge.slice=EIO@1",
        )
        .args(["record", "-q", "-N", "-a", "--call-graph", "dwarf"])
        .args(["-F", "10000", "--max-size", "160M", "-o"])
        .arg(scratch.output())
        .args(["--", load(), "spin", "60"]);
    let recorded = run(command);
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert_eq!(recorded.status.code(), Some(255), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let dir = scratch.shards();
    assert!(
        stderr.contains("freed the first part of the shards")
            && stderr.contains(&format!("shardrec merge {} -o FILE", dir.display())),
        "{stderr}"
    );
    assert!(!scratch.output().exists());
    assert!(dir.join("merged.prefix").exists() && dir.join("merged.partial").exists());
    // Freed: the output's first part is in merged.partial and no longer
    // in the shards. The live merger reads the rings first, so the shards
    // hold holes where it took their bytes (and are punched behind its
    // checkpoints where it read them). How much depends on when its last
    // checkpoint came: a first checkpoint 229 KB in held 111 KB of holes,
    // the rest being the start records, the synthesized state, the side
    // band and the pages at the holes' edges. The merge below proves the
    // rest: every sample once, the first part from merged.partial.
    let prefix = shardrec_shard::RecordingDir::open(&dir)
        .read_merged_prefix()
        .unwrap()
        .expect("a checkpoint");
    let (len, held) = shard_sizes(&dir);
    assert!(
        len > held && held > 0 && prefix.data_len > 0,
        "{held} of the shards' {len} bytes held, {} in merged.partial",
        prefix.data_len
    );
    let meta = shardrec_shard::RecordingDir::open(&dir)
        .read_meta()
        .unwrap();
    let cpus = meta.stats.unwrap().cpus;
    let recorded: u64 = cpus.iter().map(|c| c.samples).sum();
    assert!(recorded > 5_000, "{recorded} samples");

    let out = scratch.0.join("completed.data");
    let output = merge(&dir, &out, &[], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("resumed: the first"), "{stderr}");
    assert_eq!(samples_by_linux_perf_data(&out), recorded);
    // A DWARF storm at 10 kHz beside two busy spinners lost 4 chunks in
    // the kernel, as it would for perf: perf then says so, and only then.
    let report = perf(&["report", "--stdio", "--sort", "comm"], &out);
    assert_no_complaint_but_kernel_losses(&report, &out, "perf report");
}
