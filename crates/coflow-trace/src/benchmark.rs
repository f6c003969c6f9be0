//! The coflow-benchmark text format of the public Facebook trace: reader and writer.
//!
//! The first non-blank line is `<ports> <coflows>`; each following non-blank line is one coflow,
//! `<id> <arrival_ms> <m> <mapper_1> … <mapper_m> <r> <reducer_1>:<MB_1> … <reducer_r>:<MB_r>`.
//! Each reducer's megabytes are split evenly over the coflow's mappers, giving one flow per
//! (mapper, reducer) pair of `round(MB × 2^20 / m)` bytes, listed reducer by reducer.
//! See the crate documentation for the decisions this implies.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::str::SplitAsciiWhitespace;

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Workload};

use crate::error::{Field, TraceError, quoted};
use crate::synth::MAX_MACHINES;

/// The largest reducer total we accept, in bytes: 2^53, below which every whole byte count is
/// exact in an `f64`.
const MAX_REDUCER_BYTES: f64 = (1u64 << 53) as f64;

/// The most flows a trace may expand to: each coflow line stands for mappers × reducers flows,
/// so a short line can describe more than memory holds (this many take 800 MB as flows alone).
pub const MAX_TRACE_FLOWS: usize = 50_000_000;

/// Nanoseconds per millisecond, the unit of the format's arrival times.
const NANOS_PER_MS: u64 = 1_000_000;

/// Reads a coflow-benchmark trace from a file.
///
/// Errors name the file when it cannot be read, the line of the first byte that is not UTF-8
/// ([`TraceError::NotText`]), and the line and field when its content is wrong
/// (see [`parse_benchmark`]).
pub fn read_benchmark(path: &Path) -> Result<Workload, TraceError> {
    let text = crate::error::read_text(path)?;
    parse_benchmark(&text)
}

/// Parses a coflow-benchmark trace.
///
/// Blank lines are skipped wherever they are (before the header, between coflows, at the end), and
/// so is a leading byte order mark; errors keep the file's line numbers.
/// Malformed input gives a [`TraceError::Syntax`] naming the 1-based line and the [`Field`], a
/// [`TraceError::CoflowCount`] when the header's coflow count differs from the number of coflow
/// lines, a [`TraceError::DuplicateId`], or a [`TraceError::InvalidAt`] naming the line of a
/// coflow that breaks a rule of the model checked once the file is read (the bytes of all flows
/// past 2^64); it never panics.
pub fn parse_benchmark(text: &str) -> Result<Workload, TraceError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Blank lines are skipped wherever they are, before the header too; the others keep the
    // file's line numbers.
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty());
    let (header, (ports, declared)) = match lines.next() {
        Some((line, text)) => (line, parse_header(line, text)?),
        None => {
            let message = "expected `<ports> <coflows>`, got an empty trace".to_string();
            return Err(TraceError::Syntax { line: 1, field: Field::Header, message });
        }
    };

    // The header is input: do not let a huge count reserve memory the file does not back.
    let mut coflows = Vec::with_capacity(declared.min(1 << 16));
    let mut first_line_of: BTreeMap<CoflowId, usize> = BTreeMap::new();
    let mut mappers: Vec<MachineId> = Vec::new();
    let mut found = 0;
    let mut flows_left = MAX_TRACE_FLOWS;
    while let Some((line, text)) = lines.next() {
        found += 1;
        if found > declared {
            let extra = lines.count();
            return Err(TraceError::CoflowCount { line, declared, found: found + extra });
        }
        let coflow = parse_coflow(line, text, ports, &mut mappers, &mut flows_left)?;
        if let Some(&first_line) = first_line_of.get(&coflow.id) {
            return Err(TraceError::DuplicateId { line, id: coflow.id, first_line });
        }
        first_line_of.insert(coflow.id, line);
        coflows.push(coflow);
    }
    if found < declared {
        return Err(TraceError::CoflowCount { line: header, declared, found });
    }
    Workload::new(ports, coflows).map_err(|e| crate::error::invalid_at(e, &first_line_of))
}

/// Parses the header line, `<ports> <coflows>` (line `line` of the file, not blank).
fn parse_header(line: usize, text: &str) -> Result<(u32, usize), TraceError> {
    let mut toks = Tokens { line, toks: text.split_ascii_whitespace() };
    let ports = toks.number::<u32>(Field::Ports, "a machine count")?;
    if ports > MAX_MACHINES {
        return Err(toks.error(Field::Ports, format!("at most {MAX_MACHINES} machines, got {ports}")));
    }
    let coflows = toks.number::<usize>(Field::CoflowCount, "a coflow count")?;
    toks.end("the coflow count")?;
    Ok((ports, coflows))
}

/// Parses one coflow line; `mappers` is scratch space reused across lines, and `flows_left`
/// what is left of [`MAX_TRACE_FLOWS`], which the line's flows take from.
fn parse_coflow(
    line: usize,
    text: &str,
    ports: u32,
    mappers: &mut Vec<MachineId>,
    flows_left: &mut usize,
) -> Result<Coflow, TraceError> {
    let mut toks = Tokens { line, toks: text.split_ascii_whitespace() };
    let id = CoflowId(toks.number::<u64>(Field::Id, "a coflow id")?);
    let arrival_ms = toks.number::<u64>(Field::Arrival, "an arrival time in milliseconds")?;
    let arrival = arrival_ms
        .checked_mul(NANOS_PER_MS)
        .map(Nanos)
        .ok_or_else(|| toks.error(Field::Arrival, format!("arrival {arrival_ms} ms is too large")))?;

    let m = toks.number::<usize>(Field::MapperCount, "a mapper count")?;
    if m == 0 {
        return Err(toks.error(Field::MapperCount, "a coflow needs at least one mapper, got 0".to_string()));
    }
    mappers.clear();
    for i in 1..=m {
        let tok = toks.next(Field::Mapper(i))?;
        mappers.push(toks.port(tok, Field::Mapper(i), ports)?);
    }

    let r = toks.number::<usize>(Field::ReducerCount, "a reducer count")?;
    if r == 0 {
        return Err(toks.error(Field::ReducerCount, "a coflow needs at least one reducer, got 0".to_string()));
    }
    // Before any flow is made: a short line may stand for more flows than memory holds.
    *flows_left = m.checked_mul(r).and_then(|n| flows_left.checked_sub(n)).ok_or_else(|| {
        toks.error(
            Field::ReducerCount,
            format!("{m} mappers × {r} reducers take the trace past the {MAX_TRACE_FLOWS} flows it may have"),
        )
    })?;
    // The reducer count is not checked against the line yet, so cap what it may reserve.
    let mut flows = Vec::with_capacity(m.saturating_mul(r.min(1024)));
    for i in 1..=r {
        let tok = toks.next(Field::Reducer(i))?;
        let Some((port, mb)) = tok.split_once(':') else {
            return Err(toks.error(Field::Reducer(i), format!("expected <port>:<MB>, got {}", quoted(tok))));
        };
        let dst = toks.port(port, Field::ReducerPort(i), ports)?;
        let size = toks.flow_size(mb, Field::ReducerMb(i), m)?;
        flows.extend(mappers.iter().map(|&src| Flow { src, dst, size }));
    }
    toks.end("the last reducer")?;
    Ok(Coflow::new(id, arrival, flows))
}

/// The tokens of one line, with the line number for errors.
struct Tokens<'a> {
    line: usize,
    toks: SplitAsciiWhitespace<'a>,
}

impl<'a> Tokens<'a> {
    /// A syntax error at this line.
    fn error(&self, field: Field, message: String) -> TraceError {
        TraceError::Syntax { line: self.line, field, message }
    }

    /// The next token, or an error saying the line ends before `field`.
    fn next(&mut self, field: Field) -> Result<&'a str, TraceError> {
        self.toks
            .next()
            .ok_or_else(|| self.error(field, "missing: the line ends before it (truncated line?)".to_string()))
    }

    /// The next token as a whole number; `what` describes the expected value.
    fn number<T: std::str::FromStr>(&mut self, field: Field, what: &str) -> Result<T, TraceError> {
        let tok = self.next(field)?;
        tok.parse().map_err(|_| self.error(field, format!("expected {what}, got {}", quoted(tok))))
    }

    /// `tok` as a machine index below `ports`.
    fn port(&self, tok: &str, field: Field, ports: u32) -> Result<MachineId, TraceError> {
        let port: u32 =
            tok.parse().map_err(|_| self.error(field, format!("expected a port number, got {}", quoted(tok))))?;
        if port >= ports {
            let range = if ports == 0 { "none".to_string() } else { format!("0 to {}", ports - 1) };
            return Err(
                self.error(field, format!("port {port} is out of range: the header declares {ports} ports ({range})"))
            );
        }
        Ok(MachineId(port))
    }

    /// The size of each of the `m` flows into a reducer of `tok` megabytes: `round(MB × 2^20 / m)`.
    fn flow_size(&self, tok: &str, field: Field, m: usize) -> Result<Bytes, TraceError> {
        let mb: f64 = tok
            .parse()
            .map_err(|_| self.error(field, format!("expected a number of megabytes, got {}", quoted(tok))))?;
        if !mb.is_finite() {
            return Err(self.error(field, format!("expected a finite number of megabytes, got {}", quoted(tok))));
        }
        if mb < 0.0 {
            return Err(self.error(field, format!("megabytes must not be negative, got {}", quoted(tok))));
        }
        let total = mb * MIB as f64;
        if total >= MAX_REDUCER_BYTES {
            return Err(
                self.error(field, format!("{} MB is too large (the limit is 2^33 MB per reducer)", quoted(tok)))
            );
        }
        // Exact: `total` is below 2^53 and non-negative, so the cast cannot saturate.
        Ok(Bytes((total / m as f64).round() as u64))
    }

    /// Checks nothing follows the last expected token, described by `after`.
    fn end(&mut self, after: &str) -> Result<(), TraceError> {
        match self.toks.next() {
            None => Ok(()),
            Some(tok) => Err(self.error(
                Field::Trailing,
                format!("unexpected {} after {after}: the line has more tokens than its counts call for", quoted(tok)),
            )),
        }
    }
}

/// Writes a workload in the coflow-benchmark format.
///
/// The format carries only ids, whole-millisecond arrivals and mapper × reducer shuffles, so a
/// workload is representable only if every coflow:
/// - has default options: no deadline, weight 1, no parents, sizes known, no name;
/// - arrives at a whole number of milliseconds;
/// - has flows that form a full product of `m` mappers and `r` reducers (`m, r ≥ 1`), listed
///   reducer by reducer with the mappers in the same order each time, and one size per reducer.
///
/// Otherwise it returns [`TraceError::NotRepresentable`] for the first such coflow before writing
/// anything, rather than dropping information silently.
/// An invalid workload gives [`TraceError::Invalid`], and a failing writer [`TraceError::Write`].
/// Each reducer's total is written as `size × m / 2^20` MB in the shortest decimal that reads
/// back to the same `f64`, so reading the output gives back an equal workload.
pub fn write_benchmark(w: &Workload, out: &mut impl Write) -> Result<(), TraceError> {
    w.validate()?;
    let shapes: Vec<usize> = w.coflows.iter().map(mapper_count).collect::<Result<_, _>>()?;
    let mut out = BufWriter::new(out);
    write_lines(w, &shapes, &mut out).and_then(|()| out.flush()).map_err(TraceError::Write)
}

/// Writes the header and one line per coflow, given each coflow's mapper count.
fn write_lines(w: &Workload, shapes: &[usize], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{} {}", w.machines, w.coflows.len())?;
    for (c, &m) in w.coflows.iter().zip(shapes) {
        write!(out, "{} {} {m}", c.id, c.arrival.get() / NANOS_PER_MS)?;
        for f in &c.flows[..m] {
            write!(out, " {}", f.src)?;
        }
        write!(out, " {}", c.flows.len() / m)?;
        for block in c.flows.chunks_exact(m) {
            let mb = (block[0].size.get() * m as u64) as f64 / MIB as f64;
            // `{:?}` prints the shortest decimal that parses back to the same value, e.g. `48.0`.
            write!(out, " {}:{mb:?}", block[0].dst)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// The mapper count `m` under which `c` is a mapper × reducer product, or why there is none.
fn mapper_count(c: &Coflow) -> Result<usize, TraceError> {
    let not = |reason: String| TraceError::NotRepresentable { coflow: c.id, reason };
    if c.deadline.is_some() {
        return Err(not("it has a deadline, which the format cannot carry".to_string()));
    }
    if c.weight != 1.0 {
        return Err(not(format!("its weight is {}, and the format has no weights", coflow_core::shown(c.weight))));
    }
    if !c.parents.is_empty() {
        return Err(not("it has parent coflows, which the format cannot carry".to_string()));
    }
    if !c.sizes_known {
        return Err(not("its flow sizes are marked unknown, which the format cannot carry".to_string()));
    }
    if c.name.is_some() {
        return Err(not("it has a name, which the format cannot carry".to_string()));
    }
    if !c.arrival.get().is_multiple_of(NANOS_PER_MS) {
        return Err(not(format!("its arrival {} ns is not a whole number of milliseconds", c.arrival.get())));
    }
    let n = c.flows.len();
    if n == 0 {
        return Err(not("it has no flows, and the format needs at least one mapper and one reducer".to_string()));
    }
    // Any mapper count that fits describes the same flows, so take the smallest.
    let m = (1..=n).filter(|&m| n.is_multiple_of(m)).find(|&m| is_product(&c.flows, m)).ok_or_else(|| {
        not("its flows are not a full mapper × reducer product listed reducer by reducer, \
             with one size per reducer"
            .to_string())
    })?;
    if c.flows.iter().any(|f| f.size.get().checked_mul(m as u64).is_none_or(|b| b as f64 >= MAX_REDUCER_BYTES)) {
        return Err(not("a reducer receives 2^53 bytes or more, past what the format can state exactly".to_string()));
    }
    Ok(m)
}

/// Whether `flows` is `flows.len() / m` blocks of `m` flows, each block into one reducer with one
/// size, and every block from the same mappers in the same order.
fn is_product(flows: &[Flow], m: usize) -> bool {
    let first = &flows[..m];
    flows.chunks_exact(m).all(|block| {
        block.iter().zip(first).all(|(f, g)| f.src == g.src && f.dst == block[0].dst && f.size == block[0].size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_reducers_evenly_over_mappers() {
        let w = parse_benchmark("4 1\n7 12 3 0 1 2 2 3:1.0 0:3.0\n").unwrap();
        let c = &w.coflows[0];
        assert_eq!((c.id, c.arrival), (CoflowId(7), Nanos::from_millis(12)));
        let sizes: Vec<u64> = c.flows.iter().map(|f| f.size.get()).collect();
        // 1 MiB over 3 mappers rounds 349525.33 down; 3 MiB over 3 is exactly 1 MiB.
        assert_eq!(sizes, [349525, 349525, 349525, MIB, MIB, MIB]);
        let ends: Vec<(u32, u32)> = c.flows.iter().map(|f| (f.src.0, f.dst.0)).collect();
        assert_eq!(ends, [(0, 3), (1, 3), (2, 3), (0, 0), (1, 0), (2, 0)]);
        assert!(c.flows[3].is_local());
    }

    #[test]
    fn smallest_mapper_count_is_found() {
        let f = |src, dst, size| Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(size) };
        let c = Coflow::new(CoflowId(1), Nanos::ZERO, vec![f(0, 2, 5), f(1, 2, 5), f(0, 3, 7), f(1, 3, 7)]);
        assert_eq!(mapper_count(&c).unwrap(), 2);
        let c = Coflow::new(CoflowId(1), Nanos::ZERO, vec![f(0, 2, 5), f(1, 2, 5), f(1, 3, 7), f(0, 3, 7)]);
        assert!(mapper_count(&c).is_err());
    }
}
