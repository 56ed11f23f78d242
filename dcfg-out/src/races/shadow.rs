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

/// One 4 KiB page of granules.
pub struct Page {
    pub granules: [Granule; GRANULES],
}

/// Where a granule is: its page's index and its own within the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    pub page: u32,
    pub granule: u16,
}

/// Pages by number, with a small cache of the last ones found (an access is mostly near
/// the last few: the stack, the data being walked).
pub struct Shadow {
    pages: Vec<Box<Page>>,
    index: FxHashMap<u64, u32>,
    cache: [(u64, u32); 8],
}

impl Default for Shadow {
    fn default() -> Self {
        Shadow { pages: Vec::new(), index: FxHashMap::default(), cache: [(u64::MAX, 0); 8] }
    }
}

impl Shadow {
    /// The granule holding `addr` (its page made on first touch).
    #[inline]
    pub fn at(&mut self, addr: u64) -> At {
        let pn = addr >> 12;
        let c = (pn as usize) & 7;
        let granule = ((addr >> 3) as usize % GRANULES) as u16;
        if self.cache[c].0 == pn {
            return At { page: self.cache[c].1, granule };
        }
        let next = self.pages.len() as u32;
        let page = *self.index.entry(pn).or_insert(next);
        if page == next {
            self.pages.push(Box::new(Page { granules: [[Slot::default(); SLOTS]; GRANULES] }));
        }
        self.cache[c] = (pn, page);
        At { page, granule }
    }

    /// The slots of a granule found with [`at`](Self::at).
    #[inline]
    pub fn slots(&mut self, at: At) -> &mut Granule {
        &mut self.pages[at.page as usize].granules[at.granule as usize]
    }

    /// Forgets every access to `[start, end)` (memory given back: a freed block, the stack
    /// and TLS of a thread that ended).
    pub fn forget(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let (first, last) = (start >> 12, (end - 1) >> 12);
        // A large range with few pages made: visit the pages rather than the range.
        let pages: Vec<(u64, u32)> = if last - first > self.index.len() as u64 {
            self.index.iter().filter(|(p, _)| (first..=last).contains(*p)).map(|(&p, &i)| (p, i)).collect()
        } else {
            (first..=last).filter_map(|p| self.index.get(&p).map(|&i| (p, i))).collect()
        };
        for (p, i) in pages {
            let lo = (p << 12).max(start);
            let hi = (p + 1).checked_shl(12).filter(|&h| h != 0).unwrap_or(u64::MAX).min(end);
            let page = &mut self.pages[i as usize];
            for (a, m) in granules(lo, hi) {
                let g = &mut page.granules[((a >> 3) as usize) % GRANULES];
                for s in g.iter_mut() {
                    s.mask &= !m;
                    if s.mask == 0 {
                        *s = Slot::default();
                    }
                }
            }
        }
    }

    /// Bytes of memory the shadow holds.
    pub fn bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<Page>()
    }
}

/// The end of an access of `size` bytes at `addr`, clipped at the top of the address
/// space (a damaged profile's address; no x86-64 program maps the last byte).
pub fn access_end(addr: u64, size: u32) -> u64 {
    addr.saturating_add(size as u64)
}

/// The granules `[addr, end)` touches, each with its mask of the bytes touched: a range
/// that cannot wrap past the top of the address space to address 0.
pub fn granules(addr: u64, end: u64) -> impl Iterator<Item = (u64, u8)> {
    (addr & !7..end).step_by(8).map(move |g| (g, byte_mask(g, addr, end)))
}

/// The bytes of the granule at `granule` (8-aligned) that `[lo, hi)` covers, as a mask.
#[inline]
pub fn byte_mask(granule: u64, lo: u64, hi: u64) -> u8 {
    let a = (lo.max(granule) - granule) as u32;
    let b = (hi.min(granule.saturating_add(8)).max(granule) - granule) as u32;
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
            let at = s.at(a);
            s.slots(at)[0] = Slot { clock: 1, site: 1, locks: 0, thread: 0, mask: 0xff, write: true };
        }
        s.forget(0x1004, 0x1010);
        let at = s.at(0x1000);
        assert_eq!(s.slots(at)[0].mask, 0x0f);
        let at = s.at(0x1008);
        assert_eq!(s.slots(at)[0], Slot::default());
        let at = s.at(0x2000);
        assert_eq!(s.slots(at)[0].clock, 1);
    }

    #[test]
    fn pages_are_found_again_past_the_cache() {
        let mut s = Shadow::default();
        // Many pages through the eight cache entries.
        for p in 0..100u64 {
            let at = s.at(p << 12);
            s.slots(at)[1].site = p as u32 + 1;
        }
        for p in 0..100u64 {
            let at = s.at(p << 12);
            assert_eq!(s.slots(at)[1].site, p as u32 + 1);
        }
        assert_eq!(s.bytes(), 100 * std::mem::size_of::<Page>());
    }
}
