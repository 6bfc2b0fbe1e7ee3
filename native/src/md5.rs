//! MD5 (RFC 1321) of one buffer, processing whole blocks straight from it: the digest's canonical bytes
//! are built first, so no streaming buffer is needed (a byte-at-a-time one cost as much as the rounds).
//! The differential tests check every digest against Python's hashlib.

/// floor(|sin(i + 1)| * 2^32), the RFC's table T
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

macro_rules! step {
    ($f:expr, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        $a = $b.wrapping_add(
            $a.wrapping_add($f($b, $c, $d)).wrapping_add($m).wrapping_add($k).rotate_left($s),
        );
    };
}

#[inline(always)]
fn f(b: u32, c: u32, d: u32) -> u32 {
    d ^ (b & (c ^ d))
}
#[inline(always)]
fn g(b: u32, c: u32, d: u32) -> u32 {
    c ^ (d & (b ^ c))
}
#[inline(always)]
fn h(b: u32, c: u32, d: u32) -> u32 {
    b ^ c ^ d
}
#[inline(always)]
fn i(b: u32, c: u32, d: u32) -> u32 {
    c ^ (b | !d)
}

#[inline(always)]
fn block(state: &mut [u32; 4], data: &[u8]) {
    let mut m = [0u32; 16];
    for (j, word) in m.iter_mut().enumerate() {
        *word = u32::from_le_bytes([data[4 * j], data[4 * j + 1], data[4 * j + 2], data[4 * j + 3]]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for r in 0..4 {
        let j = 4 * r;
        step!(f, a, b, c, d, m[j], K[j], 7);
        step!(f, d, a, b, c, m[j + 1], K[j + 1], 12);
        step!(f, c, d, a, b, m[j + 2], K[j + 2], 17);
        step!(f, b, c, d, a, m[j + 3], K[j + 3], 22);
    }
    for r in 0..4 {
        let j = 16 + 4 * r;
        step!(g, a, b, c, d, m[(5 * j + 1) % 16], K[j], 5);
        step!(g, d, a, b, c, m[(5 * (j + 1) + 1) % 16], K[j + 1], 9);
        step!(g, c, d, a, b, m[(5 * (j + 2) + 1) % 16], K[j + 2], 14);
        step!(g, b, c, d, a, m[(5 * (j + 3) + 1) % 16], K[j + 3], 20);
    }
    for r in 0..4 {
        let j = 32 + 4 * r;
        step!(h, a, b, c, d, m[(3 * j + 5) % 16], K[j], 4);
        step!(h, d, a, b, c, m[(3 * (j + 1) + 5) % 16], K[j + 1], 11);
        step!(h, c, d, a, b, m[(3 * (j + 2) + 5) % 16], K[j + 2], 16);
        step!(h, b, c, d, a, m[(3 * (j + 3) + 5) % 16], K[j + 3], 23);
    }
    for r in 0..4 {
        let j = 48 + 4 * r;
        step!(i, a, b, c, d, m[(7 * j) % 16], K[j], 6);
        step!(i, d, a, b, c, m[(7 * (j + 1)) % 16], K[j + 1], 10);
        step!(i, c, d, a, b, m[(7 * (j + 2)) % 16], K[j + 2], 15);
        step!(i, b, c, d, a, m[(7 * (j + 3)) % 16], K[j + 3], 21);
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The MD5 of `data`.
pub fn md5(data: &[u8]) -> [u8; 16] {
    let mut state = [0x6745_2301u32, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let whole = data.len() / 64 * 64;
    for chunk in data[..whole].chunks_exact(64) {
        block(&mut state, chunk);
    }
    let rest = &data[whole..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let blocks = if rest.len() < 56 { 1 } else { 2 };
    let bits = (data.len() as u64).wrapping_mul(8);
    tail[blocks * 64 - 8..blocks * 64].copy_from_slice(&bits.to_le_bytes());
    for chunk in tail[..blocks * 64].chunks_exact(64) {
        block(&mut state, chunk);
    }
    let mut out = [0u8; 16];
    for (j, word) in state.iter().enumerate() {
        out[4 * j..4 * j + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// Up to 8 lanes of `data`, one block each per round, in AVX2 registers: several MD5s cost little more
/// than one, since a single MD5 waits on its own dependency chain.
#[cfg(target_arch = "x86_64")]
mod x8 {
    use std::arch::x86_64::*;

    use super::K;

    macro_rules! rotl {
        ($x:expr, $s:expr) => {
            _mm256_or_si256(_mm256_slli_epi32($x, $s), _mm256_srli_epi32($x, 32 - $s))
        };
    }

    macro_rules! vstep {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
            let sum = _mm256_add_epi32(_mm256_add_epi32($a, $f($b, $c, $d)), _mm256_add_epi32($m, _mm256_set1_epi32($k as i32)));
            $a = _mm256_add_epi32($b, rotl!(sum, $s));
        };
    }

    #[inline(always)]
    unsafe fn vf(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(d, _mm256_and_si256(b, _mm256_xor_si256(c, d)))
    }
    #[inline(always)]
    unsafe fn vg(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(c, _mm256_and_si256(d, _mm256_xor_si256(b, c)))
    }
    #[inline(always)]
    unsafe fn vh(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(_mm256_xor_si256(b, c), d)
    }
    #[inline(always)]
    unsafe fn vi(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, _mm256_set1_epi32(-1))))
    }

    /// The 64-byte block `j` of a lane: from the data, or from its padded tail.
    #[inline(always)]
    fn block_of<'a>(data: &'a [u8], tail: &'a [u8; 128], j: usize) -> &'a [u8] {
        let whole = data.len() / 64;
        if j < whole {
            &data[64 * j..64 * j + 64]
        } else {
            let t = j - whole;
            &tail[64 * t..64 * t + 64]
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn md5x8(inputs: &[&[u8]], out: &mut [[u8; 16]]) {
        let lanes = inputs.len();
        debug_assert!(lanes <= 8 && out.len() >= lanes);
        let mut tails = [[0u8; 128]; 8];
        let mut blocks = [0i32; 8];
        for (l, data) in inputs.iter().enumerate() {
            let whole = data.len() / 64 * 64;
            let rest = &data[whole..];
            let tail = &mut tails[l];
            tail[..rest.len()].copy_from_slice(rest);
            tail[rest.len()] = 0x80;
            let extra = if rest.len() < 56 { 1 } else { 2 };
            let bits = (data.len() as u64).wrapping_mul(8);
            tail[extra * 64 - 8..extra * 64].copy_from_slice(&bits.to_le_bytes());
            blocks[l] = (data.len() / 64 + extra) as i32;
        }
        let most = *blocks.iter().max().unwrap_or(&0) as usize;
        let empty: &[u8] = &[];
        let mut state = [
            _mm256_set1_epi32(0x6745_2301u32 as i32),
            _mm256_set1_epi32(0xefcd_ab89u32 as i32),
            _mm256_set1_epi32(0x98ba_dcfeu32 as i32),
            _mm256_set1_epi32(0x1032_5476u32 as i32),
        ];
        let counts = _mm256_loadu_si256(blocks.as_ptr() as *const __m256i);
        let zero_tail = [0u8; 128];
        for j in 0..most {
            let mut words = [[0i32; 8]; 16];
            for l in 0..8 {
                let block = if l < lanes { block_of(inputs[l], &tails[l], j.min(blocks[l] as usize - 1)) } else { block_of(empty, &zero_tail, 0) };
                for (w, word) in words.iter_mut().enumerate() {
                    word[l] = i32::from_le_bytes([block[4 * w], block[4 * w + 1], block[4 * w + 2], block[4 * w + 3]]);
                }
            }
            let mut m = [_mm256_setzero_si256(); 16];
            for w in 0..16 {
                m[w] = _mm256_loadu_si256(words[w].as_ptr() as *const __m256i);
            }
            let [mut a, mut b, mut c, mut d] = state;
            for r in 0..4 {
                let j = 4 * r;
                vstep!(vf, a, b, c, d, m[j], K[j], 7);
                vstep!(vf, d, a, b, c, m[j + 1], K[j + 1], 12);
                vstep!(vf, c, d, a, b, m[j + 2], K[j + 2], 17);
                vstep!(vf, b, c, d, a, m[j + 3], K[j + 3], 22);
            }
            for r in 0..4 {
                let j = 16 + 4 * r;
                vstep!(vg, a, b, c, d, m[(5 * j + 1) % 16], K[j], 5);
                vstep!(vg, d, a, b, c, m[(5 * (j + 1) + 1) % 16], K[j + 1], 9);
                vstep!(vg, c, d, a, b, m[(5 * (j + 2) + 1) % 16], K[j + 2], 14);
                vstep!(vg, b, c, d, a, m[(5 * (j + 3) + 1) % 16], K[j + 3], 20);
            }
            for r in 0..4 {
                let j = 32 + 4 * r;
                vstep!(vh, a, b, c, d, m[(3 * j + 5) % 16], K[j], 4);
                vstep!(vh, d, a, b, c, m[(3 * (j + 1) + 5) % 16], K[j + 1], 11);
                vstep!(vh, c, d, a, b, m[(3 * (j + 2) + 5) % 16], K[j + 2], 16);
                vstep!(vh, b, c, d, a, m[(3 * (j + 3) + 5) % 16], K[j + 3], 23);
            }
            for r in 0..4 {
                let j = 48 + 4 * r;
                vstep!(vi, a, b, c, d, m[(7 * j) % 16], K[j], 6);
                vstep!(vi, d, a, b, c, m[(7 * (j + 1)) % 16], K[j + 1], 10);
                vstep!(vi, c, d, a, b, m[(7 * (j + 2)) % 16], K[j + 2], 15);
                vstep!(vi, b, c, d, a, m[(7 * (j + 3)) % 16], K[j + 3], 21);
            }
            // lanes whose message has a block j take the new state; the others keep theirs
            let live = _mm256_cmpgt_epi32(counts, _mm256_set1_epi32(j as i32));
            let next = [a, b, c, d];
            for (s, n) in state.iter_mut().zip(next.iter()) {
                *s = _mm256_blendv_epi8(*s, _mm256_add_epi32(*s, *n), live);
            }
        }
        let mut lanes_out = [[0u32; 8]; 4];
        for (i, s) in state.iter().enumerate() {
            _mm256_storeu_si256(lanes_out[i].as_mut_ptr() as *mut __m256i, *s);
        }
        for l in 0..lanes {
            for i in 0..4 {
                out[l][4 * i..4 * i + 4].copy_from_slice(&lanes_out[i][l].to_le_bytes());
            }
        }
    }
}

/// The MD5s of up to 8 buffers (`out[i]` of `inputs[i]`), side by side where the CPU has AVX2.
pub fn md5_many(inputs: &[&[u8]], out: &mut [[u8; 16]]) {
    #[cfg(target_arch = "x86_64")]
    {
        if inputs.len() > 1 && inputs.len() <= 8 && is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above); md5x8 reads only within `inputs` and its own arrays.
            unsafe { x8::md5x8(inputs, out) };
            return;
        }
    }
    for (data, digest) in inputs.iter().zip(out.iter_mut()) {
        *digest = md5(data);
    }
}
