//! What an allocation really costs: the size class the allocator hands out for a request.
//!
//! `MEMORY USAGE` and `used_memory` count usable sizes (`zmalloc_size`), not requested ones,
//! so the `mem_usage` callbacks report each of a value's allocations rounded up the way
//! jemalloc (Redis's default allocator) rounds it: 8, then multiples of 16 up to 128, then four
//! classes per doubling (160, 192, 224, 256, 320, ...). Pure arithmetic, no allocator call: the
//! callbacks also cover allocations whose pointers are not reachable (hash table storage). With
//! another allocator the figure stays within a few percent (glibc rounds to 16 bytes plus 8).

/// The usable size jemalloc gives a request of `requested` bytes (0 for no allocation).
pub fn usable_size(requested: usize) -> usize {
    match requested {
        0 => 0,
        1..=8 => 8,
        9..=128 => requested.next_multiple_of(16),
        _ => {
            // Classes between 2^k and 2^(k+1) are 2^(k-2) apart, k = floor(log2(requested - 1)).
            let k = usize::BITS - 1 - (requested - 1).leading_zeros();
            let step = 1usize << (k - 2);
            requested
                .checked_next_multiple_of(step)
                .unwrap_or(requested)
        }
    }
}

/// The usable size of a vector's buffer of `capacity` elements of `T`.
pub fn vec_bytes<T>(capacity: usize) -> usize {
    usable_size(capacity.saturating_mul(std::mem::size_of::<T>()))
}

/// The usable size of the single allocation of a `std` hash table (hashbrown) of `capacity`
/// entries of `T`: a power-of-two number of buckets, each a `T` and a control byte, plus one
/// SIMD group (16) of trailing control bytes, the slots padded to 16.
pub fn hash_table_bytes<T>(capacity: usize) -> usize {
    const GROUP_WIDTH: usize = 16;
    let buckets = match capacity {
        0 => return 0,
        1..=3 => 4,
        4..=7 => 8,
        c => (c.saturating_mul(8) / 7).next_power_of_two(),
    };
    let slots = buckets
        .saturating_mul(std::mem::size_of::<T>())
        .next_multiple_of(GROUP_WIDTH.max(std::mem::align_of::<T>()));
    usable_size(slots + buckets + GROUP_WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jemalloc_size_classes() {
        let classes = [
            (0, 0),
            (1, 8),
            (8, 8),
            (9, 16),
            (40, 48),
            (128, 128),
            (129, 160),
            (184, 192),
            (256, 256),
            (257, 320),
            (800, 896),
            (2192, 2560),
            (4096, 4096),
            (4240, 5120),
            (14_337, 16_384),
            (16_385, 20_480),
            (1 << 20, 1 << 20),
            ((1 << 20) + 1, (1 << 20) + (1 << 18)),
        ];
        for (requested, class) in classes {
            assert_eq!(usable_size(requested), class, "{requested}");
        }
        assert_eq!(usable_size(usize::MAX), usize::MAX, "no overflow");
    }

    #[test]
    fn hash_tables_as_hashbrown_lays_them_out() {
        // 64 tokens of 16 bytes grow the table to 128 buckets: 2048 + 128 + 16 bytes.
        let mut m: std::collections::HashMap<u64, i64> = std::collections::HashMap::new();
        m.extend((0..64).map(|i| (i, 0)));
        assert_eq!(m.capacity(), 112);
        assert_eq!(
            hash_table_bytes::<(u64, i64)>(m.capacity()),
            usable_size(2192)
        );
        assert_eq!(hash_table_bytes::<(u64, i64)>(3), usable_size(4 * 17 + 16));
        assert_eq!(hash_table_bytes::<(u64, i64)>(0), 0);
    }
}
