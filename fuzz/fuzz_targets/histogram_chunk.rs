#![no_main]

//! Histogram chunk decoding of arbitrary bytes: never panics; a successful decode yields the
//! header's sample count, and encoding the samples again decodes to the same samples bit for bit.
//! (Self-contained: `saltdb_fuzz`'s shared entry list does not include it yet.)

use libfuzzer_sys::fuzz_target;
use saltdb::histogram::chunk;

fuzz_target!(|data: &[u8]| {
    let Ok(samples) = chunk::decode(data) else { return };
    assert_eq!(
        chunk::sample_count(data).ok(),
        Some(samples.len()),
        "decoded a different number of samples than the header says"
    );
    let mut again = Vec::new();
    chunk::encode(&samples, &mut again).expect("decoded samples must encode");
    let back = chunk::decode(&again).expect("an encoded chunk must decode");
    assert_eq!(back.len(), samples.len());
    for ((t, h), (wt, wh)) in back.iter().zip(&samples) {
        assert!(t == wt && h.identical(wh), "re-encoded sample differs: {h:?} vs {wh:?}");
    }
});
