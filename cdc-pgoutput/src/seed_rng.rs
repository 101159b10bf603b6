//! The deterministic simulations' random source: one `u64` seed chooses a whole scenario,
//! so a failing seed replays exactly (splitmix64: small, fast, and good enough to spread
//! the choices).

/// A seeded generator.
pub(crate) struct SeedRng(pub(crate) u64);

impl SeedRng {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index chosen by `weights`.
    pub(crate) fn pick(&mut self, weights: &[u64]) -> usize {
        let mut at = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if at < w {
                return i;
            }
            at -= w;
        }
        0
    }
}

/// Reads a seed setting from the environment.
pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The seeds a simulation runs: `PGCDC_SIM_SEEDS` (default `default_count`) from
/// `PGCDC_SIM_SEED_FROM` (default 0), or the one seed `PGCDC_SIM_SEED`.
pub(crate) fn seeds(default_count: u64) -> std::ops::Range<u64> {
    match env_u64("PGCDC_SIM_SEED") {
        Some(seed) => seed..seed.saturating_add(1),
        None => {
            let from = env_u64("PGCDC_SIM_SEED_FROM").unwrap_or(0);
            from..from.saturating_add(env_u64("PGCDC_SIM_SEEDS").unwrap_or(default_count))
        }
    }
}
