//! What follows a helper's death while recording, for every kind of
//! helper, in one table. At a stop, a death is a warning and nothing is
//! replaced: what the helper left is finished by the stop itself.

/// The kinds of helper process the coordinator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    /// One per recorded CPU: its ring into its shard.
    Writer,
    /// The side band's rings and every bpf(2) call.
    Vip,
    /// perf.data (or the stream) written while recording.
    LiveMerger,
    /// `--switch-output` without a live merger: the closed windows merged.
    WindowMerger,
}

/// The policy for one kind of helper.
#[derive(Clone, Copy, Debug)]
pub struct Restart {
    /// The kind.
    pub helper: Helper,
    /// How many times a new one takes over (for a writer, per CPU).
    pub times: usize,
    /// Where the new one takes over from.
    pub from: &'static str,
    /// What happens when none does (a death past `times`, or where it
    /// cannot be replaced).
    pub otherwise: &'static str,
}

/// The one restart policy.
pub const RESTARTS: [Restart; 4] = [
    Restart {
        helper: Helper::Writer,
        times: 3,
        from: "its CPU's ring's tail: nothing written is written again, nothing unwritten is lost",
        otherwise: "its ring is written at the stop; what the ring cannot hold until then is counted lost",
    },
    Restart {
        helper: Helper::Vip,
        times: 3,
        from: "the side-band rings' tails, and every loaded BPF program captured again",
        otherwise: "the recording stops, as for any helper's failure",
    },
    Restart {
        helper: Helper::LiveMerger,
        times: 3,
        from: "where its output's last checkpoint says the output holds the recording",
        otherwise: "the merge at the stop completes the output; a stream stops the recording (what its reader got is nowhere else)",
    },
    Restart {
        helper: Helper::WindowMerger,
        times: 0,
        from: "",
        otherwise: "the windows it did not write keep their shards, named in the summary for `shardrec merge`",
    },
];

/// How many times a helper of this kind that dies is replaced.
pub const fn times(helper: Helper) -> usize {
    let mut row = 0;
    while row < RESTARTS.len() {
        if RESTARTS[row].helper as u8 == helper as u8 {
            return RESTARTS[row].times;
        }
        row += 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_helper_has_one_row() {
        for helper in [
            Helper::Writer,
            Helper::Vip,
            Helper::LiveMerger,
            Helper::WindowMerger,
        ] {
            let rows = RESTARTS.iter().filter(|r| r.helper == helper).count();
            assert_eq!(rows, 1, "{helper:?}");
        }
        assert_eq!(times(Helper::Writer), 3);
        assert_eq!(times(Helper::WindowMerger), 0);
    }
}
