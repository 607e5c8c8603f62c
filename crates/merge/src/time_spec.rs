//! `--time` as perf report reads it (tools/perf/util/time-utils.c):
//! `START,END` in seconds with up to nine decimals (either side may be
//! empty), several such ranges separated by spaces, or percentages of the
//! time between the first and the last sample: `10%/2` (the second tenth),
//! `0%-10%`, several separated by commas, or one `N%` (the first N%).
//! A sample is kept as perf keeps it: a time of 0 always, else within a
//! range, ends included.

/// One range, in ns of the recording's clock; 0 is an open end (as in
/// perf, where a start of 0 also means "from the beginning").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    /// First time kept.
    pub start: u64,
    /// Last time kept.
    pub end: u64,
}

/// The ranges of a `--time` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeRanges(pub Vec<TimeRange>);

impl TimeRanges {
    /// Parses `spec`; percentages are of `first..=last`, the recording's
    /// first and last sample times.
    pub fn parse(spec: &str, first: u64, last: u64) -> Result<TimeRanges, String> {
        let invalid = || {
            format!("--time '{spec}': invalid time string (as perf: START,END in seconds, or 10%/2, 0%-10%, 25%)")
        };
        let ranges = match spec.contains('%') {
            true => percentages(spec, first, last),
            false => absolute(spec),
        }
        .ok_or_else(invalid)?;
        Ok(TimeRanges(ranges))
    }

    /// Whether a sample at `time` is kept (perf_time__ranges_skip_sample).
    pub fn keeps(&self, time: u64) -> bool {
        if time == 0 {
            return true;
        }
        match &self.0[..] {
            [one] => !((one.start != 0 && time < one.start) || (one.end != 0 && time > one.end)),
            many => many
                .iter()
                .any(|r| time >= r.start && (r.end == 0 || time <= r.end)),
        }
    }

    /// The earliest time any range keeps (0: from the start).
    pub fn first(&self) -> u64 {
        self.0.iter().map(|r| r.start).min().unwrap_or(0)
    }

    /// The latest time any range keeps (`u64::MAX`: to the end).
    pub fn last(&self) -> u64 {
        self.0
            .iter()
            .map(|r| if r.end == 0 { u64::MAX } else { r.end })
            .max()
            .unwrap_or(u64::MAX)
    }
}

/// `S,E` ranges separated by spaces; each needs its comma; in order, not
/// overlapping.
fn absolute(spec: &str) -> Option<Vec<TimeRange>> {
    let ranges: Vec<TimeRange> = spec
        .split_whitespace()
        .map(|piece| {
            let (start, end) = piece.split_once(',')?;
            let range = TimeRange {
                start: seconds(start)?,
                end: seconds(end)?,
            };
            (range.end == 0 || range.end >= range.start).then_some(range)
        })
        .collect::<Option<_>>()?;
    let ordered = ranges.windows(2).all(|w| w[0].end < w[1].start);
    (!ranges.is_empty() && ordered).then_some(ranges)
}

/// Seconds with up to nine decimals, as ns; empty is 0.
fn seconds(text: &str) -> Option<u64> {
    if text.is_empty() {
        return Some(0);
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let nanos: u64 = format!("{fraction:0<9}").parse().ok()?;
    whole
        .parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

/// Percent ranges: `P%/N,...`, `A%-B%,...` or one `P%`.
fn percentages(spec: &str, first: u64, last: u64) -> Option<Vec<TimeRange>> {
    let pieces: Vec<&str> = match (spec.contains('/'), spec.contains('-')) {
        (false, false) => vec![spec.strip_suffix('%').filter(|p| !p.contains('%'))?],
        _ => spec.split(',').collect(),
    };
    pieces
        .into_iter()
        .map(|piece| {
            let (from, to) = match (spec.contains('/'), spec.contains('-')) {
                (true, _) => {
                    let (width, nth) = piece.split_once('/')?;
                    let width = percent(width)?;
                    let nth: i64 = nth.parse().ok()?;
                    if width <= 0.0 {
                        return None;
                    }
                    (width * (nth - 1) as f64, width * nth as f64)
                }
                (false, true) => {
                    let (a, b) = piece.split_once('-')?;
                    (percent(a)?, percent(b)?)
                }
                (false, false) => (0.0, percent(&format!("{piece}%"))?),
            };
            percent_range(from, to, first, last)
        })
        .collect()
}

fn percent(text: &str) -> Option<f64> {
    let number: f64 = text.strip_suffix('%')?.parse().ok()?;
    Some(number / 100.0)
}

/// perf's `set_percent_time`: rounded, and a range that does not reach
/// the last sample ends a nanosecond early, so adjacent slices do not
/// share a time.
fn percent_range(from: f64, to: f64, first: u64, last: u64) -> Option<TimeRange> {
    if !(0.0..=1.0).contains(&from) || !(0.0..=1.0).contains(&to) {
        return None;
    }
    let total = (last - first) as f64;
    let start = first + (from * total).round() as u64;
    let mut end = first + (to * total).round() as u64;
    if end > start && end != last {
        end -= 1;
    }
    Some(TimeRange { start, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(spec: &str) -> Vec<(u64, u64)> {
        TimeRanges::parse(spec, 1_000, 2_000)
            .unwrap_or_else(|e| panic!("{e}"))
            .0
            .iter()
            .map(|r| (r.start, r.end))
            .collect()
    }

    #[test]
    fn reads_perf_time_strings() {
        assert_eq!(ranges("1.5,2.25"), [(1_500_000_000, 2_250_000_000)]);
        assert_eq!(ranges(",2"), [(0, 2_000_000_000)]);
        assert_eq!(ranges("3.000000001,"), [(3_000_000_001, 0)]);
        assert_eq!(ranges("1,2 3,4").len(), 2);
        assert_eq!(ranges("10%/2"), [(1_100, 1_199)]);
        assert_eq!(ranges("10%/10"), [(1_900, 2_000)]);
        assert_eq!(ranges("0%-10%,30%-40%"), [(1_000, 1_099), (1_300, 1_399)]);
        assert_eq!(ranges("25%"), [(1_000, 1_249)]);
        for bad in [
            "",
            "1.5",
            "2,1",
            "1,2 1.5,3",
            "1.0000000001,2",
            "x%",
            "10%/a",
            "0%-200%",
            "1,2,3",
        ] {
            assert!(TimeRanges::parse(bad, 1_000, 2_000).is_err(), "{bad}");
        }
    }

    #[test]
    fn keeps_as_perf_keeps() {
        let one = TimeRanges::parse("1,2", 0, 0).unwrap();
        assert!(one.keeps(0) && one.keeps(1_000_000_000) && one.keeps(2_000_000_000));
        assert!(!one.keeps(999_999_999) && !one.keeps(2_000_000_001));
        let open = TimeRanges::parse(",2", 0, 0).unwrap();
        assert!(open.keeps(1) && !open.keeps(2_000_000_001));
        let two = TimeRanges::parse("0%-10%,30%-40%", 1_000, 2_000).unwrap();
        assert!(two.keeps(1_050) && two.keeps(1_399) && !two.keeps(1_200));
        assert_eq!((two.first(), two.last()), (1_000, 1_399));
    }
}
