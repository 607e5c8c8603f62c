//! Why a recording stopped, as `meta` keeps it: a stable code (with its
//! detail, where it has one) that reading relies on, and the text people
//! read beside it. Rewording the text breaks nothing; recordings written
//! before the code, which kept only the text, still read.

use serde::{Deserialize, Serialize};

/// Why a recording stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Stored", try_from = "Stored")]
pub enum StopReason {
    /// The workload (`-- CMD`) exited.
    WorkloadExited,
    /// Every process followed with `-p` exited.
    TargetsExited,
    /// A signal asked for it: its name (`SIGINT`, `SIGTERM`, ...).
    Signal(String),
    /// A helper process failed: its name ("writer of CPU 3", "VIP").
    HelperFailed(String),
    /// `stop` on the `--control` channel.
    ControlStop,
    /// A shard could not be written (the disk full, a quota, an I/O
    /// error): what, why, and when, as one sentence.
    ShardCut(String),
    /// `--max-size`: the recording reached this many bytes.
    SizeLimit(u64),
    /// `--switch-output`: this window ended and the recording went on in
    /// the next.
    Switched,
    /// `--switch-output`: a helper failed to go on in the next window (the
    /// window's shards hold everything written before).
    SwitchFailed,
}

impl StopReason {
    /// Its code in `meta`, and its detail where it has one.
    fn code(&self) -> (&'static str, Option<String>) {
        match self {
            StopReason::WorkloadExited => ("workload-exited", None),
            StopReason::TargetsExited => ("targets-exited", None),
            StopReason::Signal(name) => ("signal", Some(name.clone())),
            StopReason::HelperFailed(name) => ("helper-failed", Some(name.clone())),
            StopReason::ControlStop => ("control-stop", None),
            StopReason::ShardCut(what) => ("shard-cut", Some(what.clone())),
            StopReason::SizeLimit(bytes) => ("size-limit", Some(bytes.to_string())),
            StopReason::Switched => ("switched", None),
            StopReason::SwitchFailed => ("switch-failed", None),
        }
    }

    /// The reason a code and its detail stand for.
    fn from_code(code: &str, detail: Option<String>) -> Option<StopReason> {
        let simple = match code {
            "workload-exited" => Some(StopReason::WorkloadExited),
            "targets-exited" => Some(StopReason::TargetsExited),
            "control-stop" => Some(StopReason::ControlStop),
            "switched" => Some(StopReason::Switched),
            "switch-failed" => Some(StopReason::SwitchFailed),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        let detail = detail?;
        match code {
            "signal" => Some(StopReason::Signal(detail)),
            "helper-failed" => Some(StopReason::HelperFailed(detail)),
            "shard-cut" => Some(StopReason::ShardCut(detail)),
            "size-limit" => detail.parse().ok().map(StopReason::SizeLimit),
            _ => None,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::WorkloadExited => f.write_str("workload exited"),
            StopReason::TargetsExited => f.write_str("target processes exited"),
            StopReason::Signal(name) => f.write_str(name),
            StopReason::HelperFailed(name) => write!(f, "{name} failed"),
            StopReason::ControlStop => f.write_str("stop on the control channel"),
            StopReason::ShardCut(what) => write!(f, "shard cut: {what}"),
            StopReason::SizeLimit(bytes) => write!(f, "size limit (--max-size {bytes} bytes)"),
            StopReason::Switched => f.write_str("switched to the next output (--switch-output)"),
            StopReason::SwitchFailed => f.write_str("a switch of output failed"),
        }
    }
}

/// A stop reason as `meta` holds it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Stored {
    /// Written now: the code read back, the text for people.
    Coded {
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        text: String,
    },
    /// Written before the code: the text alone.
    Text(String),
}

impl From<StopReason> for Stored {
    fn from(reason: StopReason) -> Stored {
        let (code, detail) = reason.code();
        Stored::Coded {
            code: code.to_string(),
            detail,
            text: reason.to_string(),
        }
    }
}

impl TryFrom<Stored> for StopReason {
    type Error = String;

    fn try_from(stored: Stored) -> Result<StopReason, String> {
        match stored {
            Stored::Coded { code, detail, text } => StopReason::from_code(&code, detail)
                .ok_or_else(|| format!("unknown stop reason {code:?} ({text})")),
            Stored::Text(text) => from_old_text(&text),
        }
    }
}

/// A stop reason as recordings made before the code kept it: the text
/// that [`Display`](std::fmt::Display) printed then.
fn from_old_text(text: &str) -> Result<StopReason, String> {
    const SHARD_CUT: &str = "shard cut: ";
    const SIZE_LIMIT: &str = "size limit (--max-size ";
    let unknown = || format!("unknown stop reason {text:?}");
    Ok(match text {
        "workload exited" => StopReason::WorkloadExited,
        "target processes exited" => StopReason::TargetsExited,
        "stop on the control channel" => StopReason::ControlStop,
        "switched to the next output (--switch-output)" => StopReason::Switched,
        "a switch of output failed" => StopReason::SwitchFailed,
        signal if signal.starts_with("SIG") => StopReason::Signal(text.to_string()),
        cut if cut.starts_with(SHARD_CUT) => StopReason::ShardCut(cut[SHARD_CUT.len()..].into()),
        limit if limit.starts_with(SIZE_LIMIT) => limit[SIZE_LIMIT.len()..]
            .trim_end_matches(" bytes)")
            .parse()
            .map(StopReason::SizeLimit)
            .map_err(|_| unknown())?,
        _ => match text.strip_suffix(" failed") {
            Some(name) => StopReason::HelperFailed(name.to_string()),
            None => return Err(unknown()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_reason() -> Vec<(StopReason, &'static str)> {
        vec![
            (StopReason::WorkloadExited, "workload exited"),
            (StopReason::TargetsExited, "target processes exited"),
            (StopReason::Signal("SIGINT".into()), "SIGINT"),
            (
                StopReason::HelperFailed("writer of CPU 3".into()),
                "writer of CPU 3 failed",
            ),
            (StopReason::ControlStop, "stop on the control channel"),
            (
                StopReason::ShardCut("cpu001.shard at 1.20 s: No space left on device".into()),
                "shard cut: cpu001.shard at 1.20 s: No space left on device",
            ),
            (
                StopReason::SizeLimit(4096),
                "size limit (--max-size 4096 bytes)",
            ),
            (
                StopReason::Switched,
                "switched to the next output (--switch-output)",
            ),
            (StopReason::SwitchFailed, "a switch of output failed"),
        ]
    }

    #[test]
    fn a_reason_is_kept_as_its_code_beside_its_text() {
        for (reason, text) in every_reason() {
            let bytes = rmp_serde::to_vec_named(&reason).unwrap();
            assert_eq!(
                rmp_serde::from_slice::<StopReason>(&bytes).ok(),
                Some(reason.clone())
            );
            let Stored::Coded { text: kept, .. } = rmp_serde::from_slice(&bytes).unwrap() else {
                panic!("{reason:?} not kept as a code");
            };
            assert_eq!(kept, text);
        }
        // What is read is the code: the text may be reworded.
        let reworded = Stored::Coded {
            code: "helper-failed".into(),
            detail: Some("VIP".into()),
            text: "the VIP gave up".into(),
        };
        let bytes = rmp_serde::to_vec_named(&reworded).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<StopReason>(&bytes).ok(),
            Some(StopReason::HelperFailed("VIP".into()))
        );
    }

    #[test]
    fn recordings_that_kept_only_the_text_still_read() {
        for (reason, text) in every_reason() {
            let bytes = rmp_serde::to_vec_named(text).unwrap();
            assert_eq!(
                rmp_serde::from_slice::<StopReason>(&bytes).ok(),
                Some(reason)
            );
        }
        let tea = rmp_serde::to_vec_named("tea time").unwrap();
        assert!(rmp_serde::from_slice::<StopReason>(&tea).is_err());
    }
}
