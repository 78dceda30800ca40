//! FNV-1a, 64 bits: a hash that stays the same across processes, builds and versions (std's does not),
//! for names and tags derived from text (not a security measure). Used by the build script too
//! (`build.rs` includes this file), for the function library's version tag.

/// The FNV-1a hash of the bytes, fed in order.
pub(crate) fn fnv1a<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    chunks.into_iter().flatten().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn the_published_test_vectors_hash_as_fnv_1a_64_and_chunks_hash_as_their_concatenation() {
        assert_eq!(fnv1a([&b""[..]]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a([&b"a"[..]]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a([&b"foobar"[..]]), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a([&b"foo"[..], b"", b"bar"]), fnv1a([&b"foobar"[..]]));
    }
}
