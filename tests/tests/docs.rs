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
