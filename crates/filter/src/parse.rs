//! The expression language of perf's BPF sample filters: terms
//! `FIELD OP VALUE` joined by `,` (all must hold), and `(A || B)` groups
//! (one must hold), where each alternative is again a `,` list.
//!
//! ```text
//! filter := list
//! list   := item (',' item)*
//! item   := '(' list ('||' list)* ')' | FIELD [OP VALUE]
//! ```
//!
//! `user` and `kernel` stand alone as well (`user` is `user == 1`).

use std::fmt;

use crate::names::Names;

/// What a term reads at the overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The interrupted instruction pointer.
    Ip,
    /// 1 when `ip` is a user address (below the kernel's half).
    User,
    /// 1 when `ip` is a kernel address.
    Kernel,
    /// The current process (thread group) id.
    Pid,
    /// The current thread id.
    Tid,
    /// The CPU the sample is taken on.
    Cpu,
    /// The current task's user id.
    Uid,
    /// The current task's group id.
    Gid,
    /// The current task's cgroup (v2) id.
    Cgroup,
    /// The sample's period.
    Period,
    /// The sample's data address (`-d`).
    Addr,
    /// The current task's name.
    Comm,
}

/// Every field, with its name.
const FIELDS: [(&str, Field); 12] = [
    ("ip", Field::Ip),
    ("user", Field::User),
    ("kernel", Field::Kernel),
    ("pid", Field::Pid),
    ("tid", Field::Tid),
    ("cpu", Field::Cpu),
    ("uid", Field::Uid),
    ("gid", Field::Gid),
    ("cgroup", Field::Cgroup),
    ("period", Field::Period),
    ("addr", Field::Addr),
    ("comm", Field::Comm),
];

/// perf's terms that read the sample's own data, which the program's
/// context does not hold before the sample is built.
const PERF_ONLY: [&str; 24] = [
    "id",
    "time",
    "txn",
    "weight",
    "weight1",
    "weight2",
    "weight3",
    "phys_addr",
    "code_pgsz",
    "data_pgsz",
    "ins_lat",
    "retire_lat",
    "p_stage_cyc",
    "mem_op",
    "mem_lvl",
    "mem_lvlnum",
    "mem_snoop",
    "mem_remote",
    "mem_lock",
    "mem_dtlb",
    "mem_blk",
    "mem_hops",
    "mem_snoopx",
    "mem_lvl_num",
];

/// A comparison; unsigned, as perf compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`: any of the value's bits set.
    And,
}

const OPS: [(&str, Op); 7] = [
    ("==", Op::Eq),
    ("!=", Op::Ne),
    ("<=", Op::Le),
    (">=", Op::Ge),
    ("<", Op::Lt),
    (">", Op::Gt),
    ("&", Op::And),
];

/// What a term compares with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A number (names of users, groups and cgroups resolved to theirs).
    Number(u64),
    /// A task name: its bytes, and whether it is a prefix (`name*`).
    Comm {
        /// At most 15 bytes (the kernel's `TASK_COMM_LEN` less the NUL).
        name: Vec<u8>,
        /// Matches every name that starts with `name`.
        prefix: bool,
    },
}

/// One condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// What it reads.
    pub field: Field,
    /// How it compares.
    pub op: Op,
    /// With what.
    pub value: Value,
}

/// A filter expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// One condition.
    Term(Term),
    /// Every one holds (`,`).
    All(Vec<Expr>),
    /// One at least holds (`||`).
    Any(Vec<Expr>),
}

impl Expr {
    /// Every term, depth first.
    pub fn terms(&self) -> Box<dyn Iterator<Item = &Term> + '_> {
        match self {
            Expr::Term(term) => Box::new(std::iter::once(term)),
            Expr::All(list) | Expr::Any(list) => Box::new(list.iter().flat_map(Expr::terms)),
        }
    }
}

/// A filter that cannot be used, and where in its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// The whole filter.
    pub text: String,
    /// Byte offset of the offending part.
    pub at: usize,
    /// The offending part.
    pub part: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--filter '{}': {} (at '{}', column {})",
            self.text,
            self.message,
            self.part,
            self.at + 1
        )
    }
}

impl std::error::Error for FilterError {}

/// The longest task name the kernel keeps.
pub const COMM_MAX: usize = 15;

/// Parses a whole filter.
pub fn parse(text: &str, names: &dyn Names) -> Result<Expr, FilterError> {
    let mut parser = Parser { text, at: 0, names };
    let expr = parser.list()?;
    parser.skip_space();
    match parser.rest() {
        "" => Ok(expr),
        rest if rest.starts_with("||") => {
            Err(parser.error(2, "'||' goes inside parentheses, as in perf: (A || B)"))
        }
        rest if rest.starts_with(')') => Err(parser.error(1, "')' without a '(' before it")),
        _ => Err(parser.error(parser.word_len(), "expected ',' between terms")),
    }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    names: &'a dyn Names,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let found = self.rest().starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    fn error(&self, len: usize, message: impl Into<String>) -> FilterError {
        self.error_at(self.at, len, message)
    }

    fn error_at(&self, at: usize, len: usize, message: impl Into<String>) -> FilterError {
        let end = (at + len.max(1)).min(self.text.len());
        FilterError {
            text: self.text.to_string(),
            at,
            part: self.text.get(at..end).unwrap_or_default().to_string(),
            message: message.into(),
        }
    }

    /// Bytes up to the next space or punctuation.
    fn word_len(&self) -> usize {
        self.rest()
            .find(|c: char| c.is_whitespace() || ",()".contains(c))
            .unwrap_or(self.rest().len())
    }

    fn list(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.item()?];
        while self.eat(",") {
            items.push(self.item()?);
        }
        Ok(match items.len() {
            1 => items.pop().expect("one item"),
            _ => Expr::All(items),
        })
    }

    fn item(&mut self) -> Result<Expr, FilterError> {
        self.skip_space();
        let open = self.at;
        if !self.eat("(") {
            return self.term().map(Expr::Term);
        }
        let mut alternatives = vec![self.list()?];
        while self.eat("||") {
            alternatives.push(self.list()?);
        }
        if !self.eat(")") {
            return Err(self.error_at(open, 1, "this '(' is not closed"));
        }
        Ok(match alternatives.len() {
            1 => alternatives.pop().expect("one alternative"),
            _ => Expr::Any(alternatives),
        })
    }

    fn term(&mut self) -> Result<Term, FilterError> {
        self.skip_space();
        let start = self.at;
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        let name = &self.text[start..start + len];
        if name.is_empty() {
            let message = match self.rest().chars().next() {
                None => "a term is missing at the end",
                Some(_) => "expected a term (ip, pid, comm, ...)",
            };
            return Err(self.error(self.word_len(), message));
        }
        let Some(field) = FIELDS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f) else {
            return Err(self.error(len, unknown_term(name)));
        };
        self.at += len;
        self.skip_space();
        let op_at = self.at;
        let Some(op) = self.operator() else {
            if matches!(field, Field::User | Field::Kernel) && self.at_end_of_term() {
                return Ok(Term {
                    field,
                    op: Op::Eq,
                    value: Value::Number(1),
                });
            }
            return Err(self.error(
                self.word_len(),
                format!("'{name}' needs an operator (== != < <= > >= &) and a value"),
            ));
        };
        let allowed = match field {
            Field::Comm | Field::Cgroup | Field::User | Field::Kernel => {
                matches!(op, Op::Eq | Op::Ne)
            }
            _ => true,
        };
        if !allowed {
            return Err(self.error_at(
                op_at,
                self.at - op_at,
                format!("'{name}' is compared with == or != only"),
            ));
        }
        let value = self.value(field, name)?;
        Ok(Term { field, op, value })
    }

    fn at_end_of_term(&mut self) -> bool {
        self.skip_space();
        let rest = self.rest();
        rest.is_empty() || rest.starts_with(',') || rest.starts_with(')') || rest.starts_with("||")
    }

    fn operator(&mut self) -> Option<Op> {
        let (token, op) = OPS.iter().find(|(t, _)| self.rest().starts_with(t))?;
        // `&&` is not perf's: it would read as `&` and a stray `&`.
        if *token == "&" && self.rest().starts_with("&&") {
            return None;
        }
        self.at += token.len();
        Some(*op)
    }

    /// The value after an operator: quoted, or up to a space, `,`, `)` or
    /// `||`.
    fn value(&mut self, field: Field, name: &str) -> Result<Value, FilterError> {
        self.skip_space();
        let start = self.at;
        let (raw, len) = match self.rest().strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], end + 2),
                None => return Err(self.error(1, "this '\"' is not closed")),
            },
            None => {
                let rest = self.rest();
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == ',' || c == ')')
                    .unwrap_or(rest.len());
                let end = rest[..end].find("||").unwrap_or(end);
                (&rest[..end], end)
            }
        };
        if raw.is_empty() {
            return Err(self.error(self.word_len(), format!("'{name}' needs a value")));
        }
        let fail = |message: String| self.error_at(start, len, message);
        let value = match field {
            Field::Comm => comm(raw).map_err(fail)?,
            Field::Cgroup => Value::Number(self.names.cgroup(raw).map_err(fail)?),
            Field::Uid => Value::Number(named(raw, |n| self.names.user(n), "user").map_err(fail)?),
            Field::Gid => {
                Value::Number(named(raw, |n| self.names.group(n), "group").map_err(fail)?)
            }
            Field::User | Field::Kernel => match number(raw) {
                Some(v @ (0 | 1)) => Value::Number(v),
                _ => return Err(fail(format!("'{name}' is 0 or 1, not '{raw}'"))),
            },
            _ => Value::Number(
                number(raw).ok_or_else(|| fail(format!("'{name}' takes a number, not '{raw}'")))?,
            ),
        };
        self.at += len;
        Ok(value)
    }
}

fn unknown_term(name: &str) -> String {
    let known: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
    match PERF_ONLY.contains(&name) {
        true => format!(
            "'{name}' reads the sample's own data, which a filter run at the overflow cannot see; terms: {}",
            known.join(" ")
        ),
        false => format!("unknown term '{name}'; terms: {}", known.join(" ")),
    }
}

/// Decimal or `0x` hex.
fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// A number, or a name `lookup` resolves.
fn named(text: &str, lookup: impl Fn(&str) -> Option<u32>, what: &str) -> Result<u64, String> {
    if let Some(n) = number(text) {
        return Ok(n);
    }
    lookup(text)
        .map(u64::from)
        .ok_or_else(|| format!("no {what} named '{text}' on this host"))
}

fn comm(text: &str) -> Result<Value, String> {
    let (name, prefix) = match text.strip_suffix('*') {
        Some(name) => (name, true),
        None => (text, false),
    };
    if name.contains('*') || name.contains('?') || name.contains('[') {
        return Err(format!(
            "'{text}': only a trailing '*' (a prefix) is understood"
        ));
    }
    if name.len() > COMM_MAX {
        return Err(format!(
            "'{name}' is longer than the {COMM_MAX} bytes the kernel keeps of a task's name"
        ));
    }
    Ok(Value::Comm {
        name: name.as_bytes().to_vec(),
        prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Names for Fixed {
        fn user(&self, name: &str) -> Option<u32> {
            (name == "alice").then_some(1000)
        }
        fn group(&self, name: &str) -> Option<u32> {
            (name == "staff").then_some(50)
        }
        fn cgroup(&self, path: &str) -> Result<u64, String> {
            match path {
                "/a/b" => Ok(77),
                _ => Err(format!("no cgroup '{path}'")),
            }
        }
    }

    fn term(field: Field, op: Op, value: u64) -> Expr {
        Expr::Term(Term {
            field,
            op,
            value: Value::Number(value),
        })
    }

    fn ok(text: &str) -> Expr {
        parse(text, &Fixed).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> FilterError {
        parse(text, &Fixed).expect_err(text)
    }

    #[test]
    fn reads_perf_expressions() {
        assert_eq!(ok("pid == 12"), term(Field::Pid, Op::Eq, 12));
        assert_eq!(
            ok("period > 1000, ip < 0xffffffff00000000"),
            Expr::All(vec![
                term(Field::Period, Op::Gt, 1000),
                term(Field::Ip, Op::Lt, 0xffff_ffff_0000_0000)
            ])
        );
        assert_eq!(
            ok("(cpu==0||tid!=3, uid <= alice)"),
            Expr::Any(vec![
                term(Field::Cpu, Op::Eq, 0),
                Expr::All(vec![
                    term(Field::Tid, Op::Ne, 3),
                    term(Field::Uid, Op::Le, 1000)
                ])
            ])
        );
        assert_eq!(ok("user"), term(Field::User, Op::Eq, 1));
        assert_eq!(
            ok("kernel, gid >= staff, cgroup != /a/b, addr & 0xf"),
            Expr::All(vec![
                term(Field::Kernel, Op::Eq, 1),
                term(Field::Gid, Op::Ge, 50),
                term(Field::Cgroup, Op::Ne, 77),
                term(Field::Addr, Op::And, 15),
            ])
        );
        assert_eq!(
            ok("comm == \"kworker/0\", comm != my-app*"),
            Expr::All(vec![
                Expr::Term(Term {
                    field: Field::Comm,
                    op: Op::Eq,
                    value: Value::Comm {
                        name: b"kworker/0".to_vec(),
                        prefix: false
                    }
                }),
                Expr::Term(Term {
                    field: Field::Comm,
                    op: Op::Ne,
                    value: Value::Comm {
                        name: b"my-app".to_vec(),
                        prefix: true
                    }
                }),
            ])
        );
    }

    #[test]
    fn points_at_what_is_wrong() {
        let e = err("pid == 1, pdi == 2");
        assert_eq!((e.at, e.part.as_str()), (10, "pdi"));
        assert!(e.to_string().contains("unknown term 'pdi'"), "{e}");
        let e = err("pid = 1");
        assert_eq!(e.at, 4);
        assert!(e.message.contains("needs an operator"), "{e}");
        assert_eq!(err("pid == abc").part, "abc");
        assert_eq!(err("uid == nosuchuser").part, "nosuchuser");
        assert_eq!(err("cgroup == /nope").part, "/nope");
        assert!(err("comm < x").message.contains("== or !="));
        assert!(err("comm == abcdefghijklmnopq")
            .message
            .contains("15 bytes"));
        assert!(err("pid == 1 || pid == 2").message.contains("parentheses"));
        assert_eq!(err("(pid == 1 || pid == 2").at, 0);
        assert!(err("weight > 3").message.contains("sample's own data"));
        assert!(err("pid == 1 pid == 2").message.contains("','"));
        assert!(err("pid == 1,").message.contains("missing"));
        assert!(err("user == 2").message.contains("0 or 1"));
        assert!(err("pid == 1 && tid == 2").message.contains("','"));
        assert_eq!(err("").message, "a term is missing at the end");
    }
}
