//! The machine to one test alone, for a test that times what abrq does.
//!
//! The end-to-end tests share one process and run side by side. Every
//! [`Abrq`](super::Abrq) holds a [`Shared`] turn while it lives; a test
//! whose assertions are times (the scale-out takeovers) takes the machine
//! [`Alone`]: it waits until no other test holds an `Abrq`, and an `Abrq`
//! made meanwhile waits until it is done. The waiting test does not stop
//! others from starting (so a test that holds one `Abrq` and makes a
//! second never waits on a test that waits on it), so it may run late.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::nap;

struct Turns {
    /// `Abrq`s alive.
    shared: usize,
    /// A test has the machine to itself.
    alone: bool,
}

static TURNS: Mutex<Turns> = Mutex::new(Turns {
    shared: 0,
    alone: false,
});
static CHANGED: Condvar = Condvar::new();

fn turns() -> MutexGuard<'static, Turns> {
    // a test that panicked held no lock: nothing here panics under it
    TURNS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One `Abrq`'s share of the machine.
pub struct Shared(());

impl Shared {
    /// Blocks the thread while a test has the machine alone.
    pub fn take() -> Shared {
        let mut t = CHANGED
            .wait_while(turns(), |t| t.alone)
            .unwrap_or_else(PoisonError::into_inner);
        t.shared += 1;
        Shared(())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        turns().shared -= 1;
        CHANGED.notify_all();
    }
}

/// The machine to one test; its own processes come from [`Alone::abrq`].
pub struct Alone(());

impl Alone {
    /// Waits until no `Abrq` of another test is alive.
    pub async fn take() -> Alone {
        loop {
            {
                let mut t = turns();
                if !t.alone && t.shared == 0 {
                    t.alone = true;
                    return Alone(());
                }
            }
            nap().await;
        }
    }

    /// An `Abrq` of the test that has the machine alone.
    pub fn abrq(&self) -> super::Abrq {
        super::Abrq::unshared()
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        turns().alone = false;
        CHANGED.notify_all();
    }
}
