//! The code a start runs, laid out side by side: the linker scripts of
//! `build/order/` (`kdd.ld`, `kd.ld`) and what makes them from profiles.
//!
//! A start of kdd runs ~2 MB of its ~19 MB of code, in ~3,300 functions
//! the linker scatters over the whole text; the kernel maps the page-cache
//! folio (or the 64 KiB) around each page touched, so nearly all of it
//! becomes resident (issue 31, item 16). Placed side by side at the head of
//! the text, what a start runs fills a few MB. The scripts name the
//! functions a callgrind profile saw run, each as a pattern that holds
//! across builds: the part of a symbol that changes with the build (legacy
//! mangling's hash, a crate's disambiguator in v0 mangling, LLVM's
//! `.llvm.N` suffix) is a wildcard, so a generic function's pattern takes
//! all its instances (kd's script names what ran exactly first, the
//! instance's hash kept: [`exact_pattern`]). The patterns are grouped in
//! phases (the start first, then an ask), each phase one input-section
//! list: lld matches a list's patterns in one pass over the sections (a
//! list per pattern costs it seconds), and keeps the lists' order.
//!
//! Made by `cargo bench -p kd-tests --bench start_order` (see
//! docs/performance.md); linked by `build/order.rs`.

use std::collections::{HashMap, HashSet};

/// The output section the scripts make, before `.text`.
pub const SECTION: &str = ".text.hot";

/// One function's pattern: the input sections it names are `.text.NAME`,
/// and `.text.unlikely.NAME` when the compiler put it with the cold code
/// (a `#[cold]` function).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub name: String,
    pub cold: bool,
}

/// The functions a callgrind profile (`--demangle=no`) saw run: every
/// `fn=` entry's name, in the order the profile first names them.
pub fn callgrind_functions(profile: &str) -> Vec<String> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let (mut seen, mut out) = (HashSet::new(), Vec::new());
    for line in profile.lines() {
        let (is_fn, rest) = if let Some(r) = line.strip_prefix("fn=(") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("cfn=(") {
            (false, r)
        } else {
            continue;
        };
        let Some((id, name)) = rest.split_once(')') else { continue };
        let name = name.strip_prefix(' ').unwrap_or("");
        if !name.is_empty() {
            names.insert(id, name);
        }
        if let Some(name) = names.get(id).filter(|_| is_fn)
            && seen.insert(*name)
        {
            out.push(name.to_string());
        }
    }
    out
}

/// `symbol` as a pattern of this one function: a legacy-mangled name keeps
/// its hash, which tells apart the instances of a generic function (and
/// changes with the dependencies' versions and features: an exact name
/// holds for the build it was read from, and [`pattern`]'s follow it in
/// kd's script for any other), and takes LLVM's `.llvm.N` suffix with a
/// wildcard; any other name is [`pattern`]'s. A script of such
/// patterns places what a start ran and nothing else — [`pattern`]'s
/// wildcard takes every instance of a generic function it names, most of
/// which never run: kd's section of them was 3.1 MB, of which an ask ran
/// a few hundred KB (issue 31, item 17).
pub fn exact_pattern(symbol: &str) -> Option<String> {
    let wild = pattern(symbol)?;
    if !wild.starts_with("_ZN") || !wild.ends_with("17h*") {
        return Some(wild);
    }
    let head = symbol.find(".llvm.").map_or(symbol, |at| &symbol[..at]);
    Some(format!("{head}*"))
}

/// `symbol` as a pattern that holds across builds, or `None` when it is
/// no name a linker script can hold (callgrind's `(below main)`, …).
pub fn pattern(symbol: &str) -> Option<String> {
    if symbol.is_empty() || !symbol.bytes().all(|b| b.is_ascii_alphanumeric() || b"_$.".contains(&b)) {
        return None;
    }
    let mut s = symbol;
    if let Some(at) = s.find(".llvm.") {
        s = &s[..at];
    }
    if s.starts_with("_ZN") {
        // Legacy mangling ends with `17h` + 16 hex digits + `E`.
        if let Some(head) = s.strip_suffix('E')
            && head.len() > 19
            && head[head.len() - 16..].bytes().all(|b| b.is_ascii_hexdigit())
            && head[..head.len() - 16].ends_with("17h")
        {
            return Some(format!("{}*", &head[..head.len() - 16]));
        }
        return Some(s.to_string());
    }
    if s.starts_with("_R") {
        // v0 mangling: a crate root is `Cs` + disambiguator + `_` + name.
        return Some(v0_without_disambiguators(s));
    }
    Some(s.to_string())
}

/// A v0 symbol with each crate's disambiguator (`Cs<base62>_`) a wildcard.
fn v0_without_disambiguators(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"Cs") {
            let end = b[i + 2..].iter().position(|c| !c.is_ascii_alphanumeric()).map(|p| i + 2 + p);
            if let Some(end) = end.filter(|&e| e > i + 2 && b[e] == b'_') {
                out.push_str("Cs*_");
                i = end + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// The names of the `.text.unlikely.*` sections in `readelf -SW` output
/// (of object files or archives), as patterns.
pub fn cold_sections(readelf: &str) -> HashSet<String> {
    readelf.split_whitespace().filter_map(|w| w.strip_prefix(".text.unlikely.")).filter_map(pattern).collect()
}

/// A script's phases (each a list of patterns), read back.
pub fn phases_of(script: &str) -> Vec<Vec<Pattern>> {
    let mut phases: Vec<Vec<Pattern>> = Vec::new();
    for line in script.lines().map(str::trim) {
        if line == "*(" {
            phases.push(Vec::new());
        } else if let Some(name) = line.strip_prefix(".text.unlikely.") {
            if let Some(p) = phases.last_mut().and_then(|p| p.iter_mut().rev().find(|p| p.name == name)) {
                p.cold = true;
            }
        } else if let Some(name) = line.strip_prefix(".text.")
            && let Some(phase) = phases.last_mut()
        {
            phase.push(Pattern { name: name.to_string(), cold: false });
        }
    }
    phases
}

/// `new` phases after `old` ones, phase by phase: each pattern once, in its
/// first place; a pattern cold in either is cold.
pub fn merge(old: Vec<Vec<Pattern>>, new: Vec<Vec<Pattern>>) -> Vec<Vec<Pattern>> {
    let mut out: Vec<Vec<Pattern>> = Vec::new();
    let mut at: HashMap<String, (usize, usize)> = HashMap::new();
    let n = old.len().max(new.len());
    let (mut old, mut new) = (old.into_iter(), new.into_iter());
    for phase in 0..n {
        out.push(Vec::new());
        for p in old.next().into_iter().flatten().chain(new.next().into_iter().flatten()) {
            match at.get(&p.name) {
                Some(&(ph, i)) => out[ph][i].cold |= p.cold,
                None => {
                    at.insert(p.name.clone(), (phase, out[phase].len()));
                    out[phase].push(p);
                }
            }
        }
    }
    out
}

/// The linker script placing `phases` in [`SECTION`], before `.text`,
/// under a comment (`about`, one line).
pub fn script(about: &str, phases: &[Vec<Pattern>]) -> String {
    let n: usize = phases.iter().map(Vec::len).sum();
    let mut s = format!("/* {about} ({n} functions) */\nSECTIONS {{\n  {SECTION} : {{\n");
    for phase in phases.iter().filter(|p| !p.is_empty()) {
        s.push_str("    *(\n");
        for p in phase {
            s.push_str(&format!("      .text.{}\n", p.name));
            if p.cold {
                s.push_str(&format!("      .text.unlikely.{}\n", p.name));
            }
        }
        s.push_str("    )\n");
    }
    s.push_str("  }\n} INSERT BEFORE .text;\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_gives_the_functions_it_saw_run_once_each_and_not_those_only_called() {
        let profile = "ob=(1) /x/kdd\nfn=(1) main\n0 1\ncfn=(2) _ZN3foo3bar17h0123456789abcdefE\ncalls=1 0\n\
                       fn=(2)\n0 1\ncfn=(3) never_entered\nfn=(1)\n0 1\n";
        assert_eq!(callgrind_functions(profile), ["main", "_ZN3foo3bar17h0123456789abcdefE"]);
    }

    #[test]
    fn a_pattern_leaves_out_what_changes_from_build_to_build() {
        assert_eq!(pattern("_ZN3foo3bar17h0123456789abcdefE").as_deref(), Some("_ZN3foo3bar17h*"));
        assert_eq!(pattern("_ZN3foo3bar17h0123456789abcdefE.llvm.1234").as_deref(), Some("_ZN3foo3bar17h*"));
        // Not a hash: kept whole.
        assert_eq!(pattern("_ZN3foo3bar17hxyzE").as_deref(), Some("_ZN3foo3bar17hxyzE"));
        assert_eq!(
            pattern("_RNvCsfLfy6EI15iL_7___rustc12___rust_alloc").as_deref(),
            Some("_RNvCs*_7___rustc12___rust_alloc")
        );
        assert_eq!(pattern("sqlite3_errcode").as_deref(), Some("sqlite3_errcode"));
        assert_eq!(pattern("writeJournalHdr.constprop.0").as_deref(), Some("writeJournalHdr.constprop.0"));
        assert_eq!(pattern("(below main)"), None);
        assert_eq!(pattern(""), None);
    }

    #[test]
    fn an_exact_pattern_keeps_the_instances_hash_and_takes_llvms_suffix() {
        let one = "_ZN4core3ptr13drop_in_place17h0123456789abcdefE";
        assert_eq!(exact_pattern(one).as_deref(), Some("_ZN4core3ptr13drop_in_place17h0123456789abcdefE*"));
        assert_eq!(exact_pattern(&format!("{one}.llvm.987")), exact_pattern(one));
        assert_ne!(
            exact_pattern("_ZN4core3ptr13drop_in_place17hfedcba9876543210E"),
            exact_pattern(one),
            "another instance of the generic function is another pattern"
        );
        // What carries no hash is as `pattern` has it.
        for other in ["_RNvCsfLfy6EI15iL_7___rustc12___rust_alloc", "sqlite3_errcode", "_ZN3foo3bar17hxyzE"] {
            assert_eq!(exact_pattern(other), pattern(other), "{other}");
        }
        assert_eq!(exact_pattern("(below main)"), None);
    }

    #[test]
    fn cold_sections_are_read_from_readelf() {
        let readelf = "  [ 5] .text.unlikely._ZN3foo4cold17h0123456789abcdefE PROGBITS 0 40 10 00 AX 0 0 16\n\
                       [ 6] .text._ZN3foo3hot17h0123456789abcdefE PROGBITS 0 50 10 00 AX 0 0 16\n";
        assert_eq!(cold_sections(readelf), HashSet::from(["_ZN3foo4cold17h*".to_string()]));
    }

    #[test]
    fn a_script_reads_back_as_written_and_merges_keep_the_first_place() {
        let p = |n: &str, cold| Pattern { name: n.into(), cold };
        let phases = vec![vec![p("a*", false), p("b", true)], vec![p("c*", false)]];
        let s = script("test", &phases);
        assert!(s.contains("      .text.b\n      .text.unlikely.b\n"), "{s}");
        assert!(s.ends_with("} INSERT BEFORE .text;\n"), "{s}");
        assert_eq!(phases_of(&s), phases);
        let merged = merge(phases, vec![vec![p("c*", true), p("d", false)], vec![p("a*", false), p("e", false)]]);
        assert_eq!(merged, vec![vec![p("a*", false), p("b", true), p("c*", true), p("d", false)], vec![p("e", false)]]);
    }

    /// The scripts the build links with hold only lines lld reads as
    /// input-section patterns, in the shape [`script`] writes.
    #[test]
    fn the_committed_scripts_are_well_formed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/order");
        for bin in ["kdd", "kd"] {
            let text = std::fs::read_to_string(dir.join(format!("{bin}.ld"))).expect("build/order script");
            let phases = phases_of(&text);
            assert!(phases.iter().map(Vec::len).sum::<usize>() > 500, "{bin}.ld names too few functions");
            let about = text.lines().next().unwrap_or_default();
            let about = about.strip_prefix("/* ").and_then(|a| a.split(" (").next()).unwrap_or_default();
            assert_eq!(script(about, &phases), text, "{bin}.ld is not as `script` writes it");
            for p in phases.iter().flatten() {
                assert!(
                    p.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_$.*".contains(&b)),
                    "{bin}.ld: {}",
                    p.name
                );
            }
        }
    }
}
