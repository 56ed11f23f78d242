//! The race analysis's shadow memory: for each 8-byte granule the program touched, the
//! last few accesses to it (who, when in that thread's clock, which bytes, where from and
//! under which locks), as ThreadSanitizer keeps them. Pages of granules are made on first
//! touch, so memory follows what the program used.

use rustc_hash::FxHashMap;

/// Accesses remembered per granule; an older one is forgotten past this.
pub const SLOTS: usize = 4;
const GRANULES: usize = 512;

/// One remembered access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// Its thread's clock when it was made; 0: the slot is free.
    pub clock: u32,
    /// Interned (pc, caller) of the access.
    pub site: u32,
    /// Interned set of locks held.
    pub locks: u32,
    pub thread: u16,
    /// Bytes of the granule accessed.
    pub mask: u8,
    pub write: bool,
}

/// One granule's slots.
pub type Granule = [Slot; SLOTS];

/// Granules by page.
#[derive(Default)]
pub struct Shadow {
    pages: FxHashMap<u64, Box<[Granule; GRANULES]>>,
}

impl Shadow {
    /// The granule holding `addr`, made empty if new.
    #[inline]
    pub fn granule(&mut self, addr: u64) -> &mut Granule {
        let page = addr >> 12;
        let g = ((addr >> 3) as usize) % GRANULES;
        &mut self.pages.entry(page).or_insert_with(|| Box::new([[Slot::default(); SLOTS]; GRANULES]))[g]
    }

    /// Forgets every access to `[start, end)` (memory given back: a freed block, the stack
    /// and TLS of a thread that ended).
    pub fn forget(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let (first, last) = (start >> 12, (end - 1) >> 12);
        // A large range with few pages made: visit the pages rather than the range.
        let pages: Vec<u64> = if last - first > self.pages.len() as u64 {
            self.pages.keys().copied().filter(|p| (first..=last).contains(p)).collect()
        } else {
            (first..=last).filter(|p| self.pages.contains_key(p)).collect()
        };
        for p in pages {
            let lo = (p << 12).max(start);
            let hi = ((p + 1) << 12).min(end);
            let page = self.pages.get_mut(&p).expect("listed");
            let mut a = lo & !7;
            while a < hi {
                let g = &mut page[((a >> 3) as usize) % GRANULES];
                let m = byte_mask(a, lo.max(a), hi.min(a + 8));
                for s in g.iter_mut() {
                    s.mask &= !m;
                    if s.mask == 0 {
                        *s = Slot::default();
                    }
                }
                a += 8;
            }
        }
    }

    /// Bytes of memory the shadow holds.
    pub fn bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<[Granule; GRANULES]>()
    }
}

/// The bytes of the granule at `granule` (8-aligned) that `[lo, hi)` covers, as a mask.
#[inline]
pub fn byte_mask(granule: u64, lo: u64, hi: u64) -> u8 {
    let a = (lo.max(granule) - granule) as u32;
    let b = (hi.min(granule + 8) - granule) as u32;
    if b <= a {
        return 0;
    }
    (((1u32 << (b - a)) - 1) << a) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(byte_mask(0x1000, 0x1000, 0x1008), 0xff);
        assert_eq!(byte_mask(0x1000, 0x1002, 0x1004), 0b1100);
        assert_eq!(byte_mask(0x1000, 0x0ffc, 0x1001), 0b1);
        assert_eq!(byte_mask(0x1008, 0x1000, 0x1008), 0);
    }

    #[test]
    fn forgetting_clears_only_the_range() {
        let mut s = Shadow::default();
        for a in [0x1000u64, 0x1008, 0x2000] {
            s.granule(a)[0] = Slot { clock: 1, site: 1, locks: 0, thread: 0, mask: 0xff, write: true };
        }
        s.forget(0x1004, 0x1010);
        assert_eq!(s.granule(0x1000)[0].mask, 0x0f);
        assert_eq!(s.granule(0x1008)[0], Slot::default());
        assert_eq!(s.granule(0x2000)[0].clock, 1);
    }
}
