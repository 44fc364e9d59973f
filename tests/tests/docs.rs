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
