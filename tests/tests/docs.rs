//! The finding table in docs/tet-v1.md lists every code with its severity.

use tet_core::tet::Code;

#[test]
fn every_code_is_documented_with_its_severity() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/tet-v1.md")).unwrap();
    for code in Code::ALL {
        let row = format!("| `{}` | {} |", code.as_str(), code.severity().name());
        assert!(
            doc.contains(&row),
            "docs/tet-v1.md lacks the row starting {row}"
        );
    }
}

/// The cetrafs finding table in docs/cetrafs.md lists every code with its severity and
/// rule, and nothing else.
#[test]
fn every_cetrafs_code_is_documented_with_its_rule() {
    use tet_core::cetrafs::Code as C;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cetrafs.md"))
        .unwrap();
    let start = doc.find("## 13.").unwrap();
    let end = doc[start..].find("## 14.").map_or(doc.len(), |e| start + e);
    let section = &doc[start..end];
    for code in C::ALL {
        let row = format!(
            "| `{}` | {} | {} |",
            code.as_str(),
            code.severity().name(),
            code.description()
        );
        assert!(
            section.contains(&row),
            "docs/cetrafs.md lacks the row {row}"
        );
    }
    let rows = section.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(
        rows,
        C::ALL.len(),
        "docs/cetrafs.md lists codes the library does not have"
    );
}

/// One exit-code table: the README's appears, the same, in every document that names
/// exit codes, and its codes in `tet-host --help`.
#[test]
fn one_exit_code_table_everywhere() {
    let read = |p: &str| {
        std::fs::read_to_string(format!("{}/../{p}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let readme = read("README.md");
    let start = readme.find("| exit | meaning |").unwrap();
    let end = readme[start..]
        .find("\n\n")
        .map_or(readme.len(), |e| start + e);
    let table = &readme[start..end];
    assert!(table.lines().count() >= 7, "{table}");
    for doc in [
        "docs/tet-v1.md",
        "docs/query.md",
        "docs/cetrafs.md",
        "docs/hostile-inputs.md",
    ] {
        assert!(
            read(doc).contains(table),
            "{doc} lacks the README's exit-code table"
        );
    }
    let help = tet_host::cli::EXIT_CODES;
    for row in table.lines().skip(2) {
        let code = row.trim_start_matches("| ").split(' ').next().unwrap();
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(code)),
            "--help lacks exit {code}"
        );
    }
}

/// Section 11.1 of docs/cetrafs.md, the one table of feature bits and fields taken from
/// reserved space, has a row for every bit the library knows, at its set and position,
/// and names no bit the library does not know; the bits of section 11's table agree.
#[test]
fn every_cetrafs_feature_bit_is_in_the_reserved_bytes_table() {
    use tet_core::cetrafs::Features as F;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cetrafs.md"))
        .unwrap();
    let start = doc.find("### 11.1").unwrap();
    let end = doc[start..].find("## 12.").map_or(doc.len(), |e| start + e);
    let table = &doc[start..end];
    let mut known = Vec::new();
    for (set, bits) in [
        ("compat", F::COMPAT),
        ("incompat", F::INCOMPAT),
        ("ro_compat", F::RO_COMPAT),
    ] {
        for (bit, name) in bits {
            let row = format!("| `{name}` | `feature_{set}` bit {bit} |");
            assert!(table.contains(&row), "section 11.1 lacks the row {row}");
            let listed = format!("| {set} | {bit} | `{name}` |");
            assert!(doc.contains(&listed), "section 11 lacks {listed}");
            known.push(*name);
        }
    }
    for line in table.lines().filter(|l| l.contains("| `feature_")) {
        assert!(
            known
                .iter()
                .any(|n| line.starts_with(&format!("| `{n}` |"))),
            "section 11.1 names a bit the library does not know: {line}"
        );
    }
    assert!(
        table.contains("| `replaying_txn` | journal flag block, bytes 28..36 |"),
        "section 11.1 lacks replaying_txn"
    );
}
