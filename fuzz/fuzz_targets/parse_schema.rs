//! Any text: the parser, resolver, canonical printer and code generator must not
//! panic; a valid schema's canonical form must re-parse to the same fingerprint.
#![no_main]

use keel_schema::{Builder, Schema};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(schema) = Schema::parse(text, "fuzz.fbs") {
        let canonical = schema.to_fbs();
        let again = Schema::parse(&canonical, "canonical.fbs").expect("canonical form parses");
        assert_eq!(again.fingerprint(), schema.fingerprint());
        let _ = Builder::new().format(false).generate(&schema);
        let _ = keel_schema::compat::check(&schema, &again);
    }
});
