//! Random ids and jitter, from the kernel.

/// A random 32-hex-digit id (like a container id) from the kernel's random source.
pub fn random_id() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into a valid buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Extremely unlikely (the call blocks only before the pool is initialised); fall
        // back to time and pid, which are unique enough for ids on one machine.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        b[..8].copy_from_slice(&(t.as_nanos() as u64).to_le_bytes());
        b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A random number in [0, 1).
pub fn random_f64() -> f64 {
    let id = random_id();
    let n = u64::from_str_radix(&id[..13], 16).unwrap_or(0);
    n as f64 / (1u64 << 52) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        assert_eq!(random_id().len(), 32);
        assert_ne!(random_id(), random_id());
    }
}
