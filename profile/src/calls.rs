//! The library functions whose calls the collector records (format version 4): the
//! synchronisation and allocation functions of the C library, found by their exported
//! names. One list, so the collector that watches them and the analyses that read the
//! records agree on every number.
//!
//! At a watched function's entry the collector writes a sync record and an
//! [`Escape::Call`](crate::tags::Escape::Call) with the first two argument registers and
//! the return address; before each `ret` inside the function's symbol, an
//! [`Escape::Return`](crate::tags::Escape::Return) with rax.

/// A watched function. The number is what the profile stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Func {
    MutexLock = 1,
    MutexTrylock = 2,
    MutexTimedlock = 3,
    MutexUnlock = 4,
    SpinLock = 5,
    SpinTrylock = 6,
    SpinUnlock = 7,
    RwRdlock = 8,
    RwTryrdlock = 9,
    RwTimedrdlock = 10,
    RwWrlock = 11,
    RwTrywrlock = 12,
    RwTimedwrlock = 13,
    RwUnlock = 14,
    CondWait = 15,
    CondTimedwait = 16,
    CondSignal = 17,
    CondBroadcast = 18,
    BarrierWait = 19,
    SemWait = 20,
    SemTrywait = 21,
    SemTimedwait = 22,
    SemPost = 23,
    Create = 24,
    Join = 25,
    Malloc = 26,
    Calloc = 27,
    Realloc = 28,
    Free = 29,
    Once = 30,
    MutexInit = 31,
    MutexDestroy = 32,
    CondInit = 33,
    CondDestroy = 34,
    RwInit = 35,
    RwDestroy = 36,
    BarrierInit = 37,
    BarrierDestroy = 38,
    SemInit = 39,
    SemDestroy = 40,
    SpinInit = 41,
    SpinDestroy = 42,
    /// C++ function-local statics: `__cxa_guard_acquire` returns 1 to the one caller that
    /// runs the initialiser, 0 once another has; `__cxa_guard_release` publishes it.
    GuardAcquire = 43,
    GuardRelease = 44,
    GuardAbort = 45,
    /// stdio's stream locks.
    Flockfile = 46,
    Ftrylockfile = 47,
    Funlockfile = 48,
}

/// What a call does to a lock (the first argument, or the second for condition waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockOp {
    /// Takes the lock exclusively when it returns (when it returns 0, for `may_fail`).
    Acquire { shared: bool, may_fail: bool },
    /// Gives the lock up at entry.
    Release,
    /// Gives the mutex (second argument) up at entry and holds it again at return.
    Wait,
}

/// What a call does to its object's memory ([`Func::object_access`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectAccess {
    /// Creates or destroys it: a plain write.
    Write,
    /// Uses it: an atomic read.
    Use,
}

/// (exported name, function). Aliases of one function share its number.
pub const NAMES: &[(&str, Func)] = &[
    ("pthread_mutex_lock", Func::MutexLock),
    ("pthread_mutex_trylock", Func::MutexTrylock),
    ("pthread_mutex_timedlock", Func::MutexTimedlock),
    ("pthread_mutex_clocklock", Func::MutexTimedlock),
    ("pthread_mutex_unlock", Func::MutexUnlock),
    ("pthread_spin_lock", Func::SpinLock),
    ("pthread_spin_trylock", Func::SpinTrylock),
    ("pthread_spin_unlock", Func::SpinUnlock),
    ("pthread_rwlock_rdlock", Func::RwRdlock),
    ("pthread_rwlock_tryrdlock", Func::RwTryrdlock),
    ("pthread_rwlock_timedrdlock", Func::RwTimedrdlock),
    ("pthread_rwlock_clockrdlock", Func::RwTimedrdlock),
    ("pthread_rwlock_wrlock", Func::RwWrlock),
    ("pthread_rwlock_trywrlock", Func::RwTrywrlock),
    ("pthread_rwlock_timedwrlock", Func::RwTimedwrlock),
    ("pthread_rwlock_clockwrlock", Func::RwTimedwrlock),
    ("pthread_rwlock_unlock", Func::RwUnlock),
    ("pthread_cond_wait", Func::CondWait),
    ("pthread_cond_timedwait", Func::CondTimedwait),
    ("pthread_cond_clockwait", Func::CondTimedwait),
    ("pthread_cond_signal", Func::CondSignal),
    ("pthread_cond_broadcast", Func::CondBroadcast),
    ("pthread_barrier_wait", Func::BarrierWait),
    ("sem_wait", Func::SemWait),
    ("sem_trywait", Func::SemTrywait),
    ("sem_timedwait", Func::SemTimedwait),
    ("sem_clockwait", Func::SemTimedwait),
    ("sem_post", Func::SemPost),
    ("pthread_create", Func::Create),
    ("pthread_join", Func::Join),
    ("pthread_timedjoin_np", Func::Join),
    ("pthread_clockjoin_np", Func::Join),
    ("malloc", Func::Malloc),
    ("calloc", Func::Calloc),
    ("realloc", Func::Realloc),
    ("free", Func::Free),
    ("pthread_once", Func::Once),
    ("call_once", Func::Once),
    ("pthread_mutex_init", Func::MutexInit),
    ("pthread_mutex_destroy", Func::MutexDestroy),
    ("pthread_cond_init", Func::CondInit),
    ("pthread_cond_destroy", Func::CondDestroy),
    ("pthread_rwlock_init", Func::RwInit),
    ("pthread_rwlock_destroy", Func::RwDestroy),
    ("pthread_barrier_init", Func::BarrierInit),
    ("pthread_barrier_destroy", Func::BarrierDestroy),
    ("sem_init", Func::SemInit),
    ("sem_destroy", Func::SemDestroy),
    ("pthread_spin_init", Func::SpinInit),
    ("pthread_spin_destroy", Func::SpinDestroy),
    ("__cxa_guard_acquire", Func::GuardAcquire),
    ("__cxa_guard_release", Func::GuardRelease),
    ("__cxa_guard_abort", Func::GuardAbort),
    ("flockfile", Func::Flockfile),
    ("_IO_flockfile", Func::Flockfile),
    ("ftrylockfile", Func::Ftrylockfile),
    ("_IO_ftrylockfile", Func::Ftrylockfile),
    ("funlockfile", Func::Funlockfile),
    ("_IO_funlockfile", Func::Funlockfile),
];

impl Func {
    /// The function stored as `n`, if any.
    pub fn from_u16(n: u16) -> Option<Func> {
        NAMES.iter().map(|&(_, f)| f).find(|&f| f as u16 == n)
    }

    /// The function exported as `name`, if watched.
    pub fn by_name(name: &str) -> Option<Func> {
        NAMES.iter().find(|&&(n, _)| n == name).map(|&(_, f)| f)
    }

    /// Its first name in [`NAMES`].
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|&&(_, f)| f == self).map_or("?", |&(n, _)| n)
    }

    /// What it does to a lock, if it is a lock function.
    pub fn lock_op(self) -> Option<LockOp> {
        use Func::*;
        let acquire = |shared, may_fail| Some(LockOp::Acquire { shared, may_fail });
        match self {
            MutexLock | SpinLock | RwWrlock | Flockfile => acquire(false, false),
            MutexTrylock | MutexTimedlock | SpinTrylock | RwTrywrlock | RwTimedwrlock | Ftrylockfile => acquire(false, true),
            RwRdlock => acquire(true, false),
            RwTryrdlock | RwTimedrdlock => acquire(true, true),
            MutexUnlock | SpinUnlock | RwUnlock | Funlockfile => Some(LockOp::Release),
            CondWait | CondTimedwait => Some(LockOp::Wait),
            _ => None,
        }
    }

    /// What it does to the synchronisation object its first argument points at, as memory:
    /// creating or destroying it writes it; every other use of a lock, condition variable,
    /// barrier or semaphore reads it atomically (as ThreadSanitizer's interceptors model
    /// them). None for the rest.
    pub fn object_access(self) -> Option<ObjectAccess> {
        use Func::*;
        match self {
            MutexInit | MutexDestroy | CondInit | CondDestroy | RwInit | RwDestroy | BarrierInit | BarrierDestroy | SemInit
            | SemDestroy | SpinInit | SpinDestroy => Some(ObjectAccess::Write),
            CondSignal | CondBroadcast | BarrierWait | SemWait | SemTrywait | SemTimedwait | SemPost => Some(ObjectAccess::Use),
            _ if self.lock_op().is_some() => Some(ObjectAccess::Use),
            _ => None,
        }
    }

    /// Whether the code it runs is the program's (a once routine's initialiser), not only
    /// the library's own.
    pub fn runs_program_code(self) -> bool {
        self == Func::Once
    }

    /// Whether its return value matters to an analysis (the collector records it for all).
    pub fn result_matters(self) -> bool {
        matches!(self.lock_op(), Some(LockOp::Acquire { may_fail: true, .. }))
            || matches!(self, Func::GuardAcquire | Func::SemTrywait | Func::SemTimedwait | Func::Malloc | Func::Calloc | Func::Realloc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &(name, f) in NAMES {
            assert!(seen.insert(name), "{name} twice");
            assert_eq!(Func::from_u16(f as u16), Some(f));
            assert_eq!(Func::by_name(name), Some(f));
        }
        assert_eq!(Func::from_u16(0), None);
        assert_eq!(Func::from_u16(49), None);
        assert_eq!(Func::MutexTimedlock.name(), "pthread_mutex_timedlock");
    }

    #[test]
    fn lock_operations() {
        assert_eq!(Func::MutexTrylock.lock_op(), Some(LockOp::Acquire { shared: false, may_fail: true }));
        assert_eq!(Func::RwRdlock.lock_op(), Some(LockOp::Acquire { shared: true, may_fail: false }));
        assert_eq!(Func::SpinUnlock.lock_op(), Some(LockOp::Release));
        assert_eq!(Func::CondTimedwait.lock_op(), Some(LockOp::Wait));
        assert_eq!(Func::Malloc.lock_op(), None);
        assert!(Func::SpinTrylock.result_matters() && !Func::MutexLock.result_matters());
    }
}
