//! Event modifiers (`:u`, `:pp`, `{...}:S`) applied as perf applies them.

use shardrec_sys::{Attr, Flag};

/// What an event's modifiers (and its group's) ask of its attr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modifiers {
    /// Not in user space.
    pub exclude_user: bool,
    /// Not in the kernel.
    pub exclude_kernel: bool,
    /// Not in the hypervisor.
    pub exclude_hv: bool,
    /// Not while a guest runs.
    pub exclude_guest: bool,
    /// Not in the host (`:G`).
    pub exclude_host: bool,
    /// Not in the idle task (`:I`).
    pub exclude_idle: bool,
    /// Skid constraint, 0 to 3 (`p`, `pp`, `ppp`).
    pub precise_ip: u8,
    /// `:P`: the highest precise level the PMU offers.
    pub precise_max: bool,
    /// `:S`: the leader's samples read every member's count.
    pub sample_read: bool,
    /// `:D`: pinned to the PMU.
    pub pinned: bool,
    /// `:e`: alone on the PMU.
    pub exclusive: bool,
    /// `:W`: a weak group, split if it cannot be scheduled whole.
    pub weak: bool,
    /// Whether `G` or `H` was given (they turn off the u/k/h guest default).
    guest_or_host: bool,
}

impl Modifiers {
    /// An event as perf parses it before its modifiers: counted everywhere
    /// but in guests (perf's default without `--guest`).
    pub fn new() -> Modifiers {
        Modifiers {
            exclude_guest: true,
            ..Modifiers::default()
        }
    }

    /// An event's own modifiers, as perf computes them: with no letters the
    /// event keeps perf's default (no guest); letters start from nothing
    /// excluded, so `:k` leaves guests in while `:u` and `:p` keep them out
    /// (perf's rules, surprising as they are).
    pub fn of_event(letters: &str) -> Modifiers {
        if letters.is_empty() {
            return Modifiers::new();
        }
        let mut modifiers = Modifiers::default();
        modifiers.apply(letters);
        modifiers
    }

    /// Whether `G` or `H` chose the guest and host exclusions, which perf
    /// then never drops for a PMU that refuses them.
    pub fn guest_or_host(&self) -> bool {
        self.guest_or_host
    }

    /// Applies modifier letters (already checked by the grammar). The first
    /// of `u`, `k`, `h` excludes every space, then each letter lets its own
    /// space back in; `G`/`H` do the same for guest and host. A group's
    /// letters are applied after each member's own.
    pub fn apply(&mut self, letters: &str) {
        let mut excluding = self.exclude_user || self.exclude_kernel || self.exclude_hv;
        for letter in letters.chars() {
            match letter {
                'u' | 'k' | 'h' => {
                    if !excluding {
                        excluding = true;
                        self.exclude_user = true;
                        self.exclude_kernel = true;
                        self.exclude_hv = true;
                    }
                    // Only `u` keeps guests out (perf's get_event_modifier).
                    if letter == 'u' && !self.guest_or_host {
                        self.exclude_guest = true;
                    }
                    match letter {
                        'u' => self.exclude_user = false,
                        'k' => self.exclude_kernel = false,
                        _ => self.exclude_hv = false,
                    }
                }
                'G' | 'H' => {
                    if !self.guest_or_host {
                        self.guest_or_host = true;
                        self.exclude_guest = true;
                        self.exclude_host = true;
                    }
                    match letter {
                        'G' => self.exclude_guest = false,
                        _ => self.exclude_host = false,
                    }
                }
                'p' => {
                    self.precise_ip = (self.precise_ip + 1).min(3);
                    if !self.guest_or_host {
                        self.exclude_guest = true;
                    }
                }
                'I' => self.exclude_idle = true,
                'P' => self.precise_max = true,
                'S' => self.sample_read = true,
                'D' => self.pinned = true,
                'e' => self.exclusive = true,
                'W' => self.weak = true,
                _ => unreachable!("the grammar checks the letters"),
            }
        }
    }
}

/// The modifiers perf writes after a name it makes from an attr
/// (`evsel__add_modifiers`): the spaces counted when some are excluded,
/// the precise level, then `H`/`G` for host and guest when the guest
/// exclusion is not the one those imply (excluded with either of them,
/// counted without).
pub fn suffix_of(attr: &Attr) -> String {
    let counted = |flag| !attr.flag(flag);
    let spaces = [
        (Flag::ExcludeKernel, 'k'),
        (Flag::ExcludeUser, 'u'),
        (Flag::ExcludeHv, 'h'),
    ];
    let excluding = spaces.iter().any(|&(flag, _)| attr.flag(flag));
    let mut letters: String = spaces
        .iter()
        .filter(|&&(flag, _)| excluding && counted(flag))
        .map(|&(_, letter)| letter)
        .collect();
    let precise = attr.precise_ip() as usize;
    letters.push_str(&"ppp"[..precise]);
    let guest_implied = excluding || precise > 0;
    if attr.flag(Flag::ExcludeHost) || attr.flag(Flag::ExcludeGuest) == guest_implied {
        [(Flag::ExcludeHost, 'H'), (Flag::ExcludeGuest, 'G')]
            .iter()
            .filter(|&&(flag, _)| counted(flag))
            .for_each(|&(_, letter)| letters.push(letter));
    }
    match letters.is_empty() {
        true => letters,
        false => format!(":{letters}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(letters: &str) -> Modifiers {
        Modifiers::of_event(letters)
    }

    #[test]
    fn spaces_as_perf_reads_them() {
        let u = with("u");
        assert!(!u.exclude_user && u.exclude_kernel && u.exclude_hv && u.exclude_guest);
        let uk = with("uk");
        assert!(!uk.exclude_user && !uk.exclude_kernel && uk.exclude_hv);
        assert!(!with("k").exclude_guest && !with("I").exclude_guest);
        assert!(Modifiers::of_event("").exclude_guest && with("p").exclude_guest);
        let g = with("G");
        assert!(!g.exclude_guest && g.exclude_host);
        let h = with("H");
        assert!(h.exclude_guest && !h.exclude_host);
        assert_eq!(with("ppp").precise_ip, 3);
        assert!(with("S").sample_read && with("D").pinned && with("e").exclusive);
    }

    #[test]
    fn suffixes_as_perf_makes_them_from_an_attr() {
        let mut attr = Attr::software(0);
        assert_eq!(suffix_of(&attr), ":HG");
        attr.set_flag(Flag::ExcludeGuest, true);
        assert_eq!(suffix_of(&attr), "");
        attr.set_precise_ip(2);
        assert_eq!(suffix_of(&attr), ":ppH");
        attr.set_flag(Flag::ExcludeGuest, false);
        assert_eq!(suffix_of(&attr), ":pp");
        attr.set_exclude(false, true);
        attr.set_flag(Flag::ExcludeHv, true);
        attr.set_precise_ip(0);
        assert_eq!(suffix_of(&attr), ":u");
        attr.set_flag(Flag::ExcludeHost, true);
        assert_eq!(suffix_of(&attr), ":uG");
    }

    #[test]
    fn group_letters_add_to_the_members() {
        let mut member = with("u");
        member.apply("k");
        assert!(!member.exclude_user && !member.exclude_kernel && member.exclude_hv);
    }
}
