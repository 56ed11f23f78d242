//! Vector clocks: one counter per thread, the happens-before order of the race analysis.

/// A vector clock over the profile's threads, as long as its last nonzero component:
/// threads it has not heard of are 0, so a clock costs what it knows, not the run's
/// thread count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clock(Vec<u32>);

impl Clock {
    /// All zero.
    pub fn new() -> Clock {
        Clock(Vec::new())
    }

    /// Zero but for thread `t`'s component, `v` (for tests).
    #[cfg(test)]
    pub(crate) fn with(t: usize, v: u32) -> Clock {
        let mut c = vec![0; t + 1];
        c[t] = v;
        Clock(c)
    }

    /// Thread `t`'s component.
    #[inline]
    pub fn get(&self, t: usize) -> u32 {
        self.0.get(t).copied().unwrap_or(0)
    }

    /// Advances thread `t`'s component; false (and the component kept at its largest) when
    /// it cannot advance: a thread past 2^32 - 1 epochs, which the analysis cannot order.
    #[inline]
    pub fn tick(&mut self, t: usize) -> bool {
        if t >= self.0.len() {
            self.0.resize(t + 1, 0);
        }
        match self.0[t].checked_add(1) {
            Some(v) => {
                self.0[t] = v;
                true
            }
            None => false,
        }
    }

    /// Takes the later of each component of `self` and `other`.
    pub fn join(&mut self, other: &Clock) {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, &b) in self.0.iter_mut().zip(&other.0) {
            *a = (*a).max(b);
        }
    }

    /// Whether an event of thread `t` at clock `c` happened before a point with this clock.
    #[inline]
    pub fn saw(&self, t: usize, c: u32) -> bool {
        c <= self.get(t)
    }
}

/// A thread's (or a sync object's) two clocks: `full` with every happens-before edge, what
/// ordered this run; `weak` without lock hand-offs (release to acquire of one lock), what
/// orders the accesses whatever order the threads took the locks in. Both advance together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clocks {
    pub full: Clock,
    pub weak: Clock,
}

impl Clocks {
    /// Components held (both clocks).
    pub fn len(&self) -> usize {
        self.full.0.len() + self.weak.0.len()
    }

    /// All zero.
    pub fn new() -> Clocks {
        Clocks { full: Clock::new(), weak: Clock::new() }
    }

    /// Thread `t`'s own component (the same in both).
    #[inline]
    pub fn get(&self, t: usize) -> u32 {
        self.full.get(t)
    }

    /// Advances thread `t`'s component; false when it cannot ([`Clock::tick`]).
    #[inline]
    pub fn tick(&mut self, t: usize) -> bool {
        self.full.tick(t) & self.weak.tick(t)
    }

    /// Raises thread `t`'s own component to `v` in both clocks, as its ticks would.
    pub fn raise(&mut self, t: usize, v: u32) {
        for c in [&mut self.full, &mut self.weak] {
            if t >= c.0.len() {
                c.0.resize(t + 1, 0);
            }
            c.0[t] = c.0[t].max(v);
        }
    }

    /// Takes what `other` knows: all of it, or (`lock`, a lock hand-off) only into `full`.
    pub fn join(&mut self, other: &Clocks, lock: bool) {
        self.full.join(&other.full);
        if !lock {
            self.weak.join(&other.weak);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_at_its_largest_does_not_wrap() {
        let mut c = Clock(vec![0, u32::MAX - 1]);
        assert!(c.tick(1) && c.get(1) == u32::MAX);
        assert!(!c.tick(1), "past 2^32 - 1");
        assert_eq!(c.get(1), u32::MAX, "kept, not wrapped to 0 (which means 'never')");
    }

    #[test]
    fn join_and_order() {
        let mut a = Clock::new();
        a.tick(0);
        let mut b = Clock::new();
        b.tick(1);
        b.tick(1);
        assert!(!b.saw(0, 1));
        b.join(&a);
        assert!(b.saw(0, 1) && b.get(1) == 2 && !b.saw(2, 1));
        let mut x = Clocks::new();
        x.tick(0);
        let mut y = Clocks::new();
        y.join(&x, true);
        assert!(y.full.saw(0, 1) && !y.weak.saw(0, 1), "a lock hand-off reaches only the full clock");
        y.join(&x, false);
        assert!(y.weak.saw(0, 1));
    }
}
