//! Items handed to another thread in batches, each batch going back emptied for reuse: the
//! one way the engine's memory half ([`Apart`](super::memside::Apart)) and the store
//! ([`Background`](super::store::Background)) are fed from the threads beside them.

use crossbeam::channel::{bounded, Receiver, Sender};

/// The sending side: items gathered into a batch, each full batch sent, emptied batches
/// taken back. A clone sends to the same receiver, its own batches in its own order.
pub struct Batcher<T> {
    batch: Vec<T>,
    cap: usize,
    tx: Option<Sender<Vec<T>>>,
    free: Receiver<Vec<T>>,
}

/// The receiving side: the batches as each sender sent them.
pub struct Batches<T> {
    rx: Receiver<Vec<T>>,
    free: Sender<Vec<T>>,
}

/// The receiving side is gone: it stopped or failed (its owner says which).
#[derive(Debug, PartialEq, Eq)]
pub struct Gone;

/// A hand-over in batches of `cap` items, at most `depth` of them sent and not yet taken.
pub fn channel<T>(cap: usize, depth: usize) -> (Batcher<T>, Batches<T>) {
    let (tx, rx) = bounded(depth);
    let (free_tx, free) = bounded(depth);
    (Batcher { batch: Vec::with_capacity(cap), cap, tx: Some(tx), free }, Batches { rx, free: free_tx })
}

impl<T> Batcher<T> {
    /// Adds `x`, sending the batch once it is full.
    #[inline]
    pub fn push(&mut self, x: T) -> Result<(), Gone> {
        self.batch.push(x);
        if self.batch.len() >= self.cap {
            return self.send();
        }
        Ok(())
    }

    /// Sends the batch, starting the next in an emptied one where one came back.
    #[cold]
    #[inline(never)]
    fn send(&mut self) -> Result<(), Gone> {
        let next = self.free.try_recv().unwrap_or_else(|_| Vec::with_capacity(self.cap));
        let full = std::mem::replace(&mut self.batch, next);
        match &self.tx {
            Some(tx) if tx.send(full).is_ok() => Ok(()),
            _ => Err(Gone),
        }
    }

    /// Sends what is gathered and stops sending: the receiver has everything once every
    /// clone has closed or been dropped.
    pub fn close(&mut self) -> Result<(), Gone> {
        let sent = if self.batch.is_empty() { Ok(()) } else { self.send() };
        self.tx = None;
        sent
    }

    /// Stops sending, dropping what is gathered (the receiver is failing or done with).
    pub fn disconnect(&mut self) {
        self.tx = None;
    }
}

impl<T> Clone for Batcher<T> {
    fn clone(&self) -> Self {
        Batcher { batch: Vec::with_capacity(self.cap), cap: self.cap, tx: self.tx.clone(), free: self.free.clone() }
    }
}

impl<T> Batches<T> {
    /// Calls `f` on every item, in each sender's order, until `f` fails or every sender
    /// has closed.
    pub fn each<E>(self, mut f: impl FnMut(&T) -> Result<(), E>) -> Result<(), E> {
        for mut batch in &self.rx {
            for x in &batch {
                f(x)?;
            }
            batch.clear();
            let _ = self.free.try_send(batch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sender_arrives_whole_and_in_order() {
        let (mut a, rx) = channel::<u32>(3, 2);
        let mut b = a.clone();
        let got = std::thread::scope(|s| {
            let h = s.spawn(move || {
                let mut got = Vec::new();
                rx.each(|&x| -> Result<(), ()> {
                    got.push(x);
                    Ok(())
                })
                .unwrap();
                got
            });
            for i in 0..10 {
                a.push(i).unwrap();
                b.push(100 + i).unwrap();
            }
            a.close().unwrap();
            // A dropped clone counts as closed, its partial batch (109, 1000) lost.
            b.push(1000).unwrap();
            drop(b);
            h.join().unwrap()
        });
        let (mine, other): (Vec<u32>, Vec<u32>) = got.into_iter().partition(|&x| x < 100);
        assert_eq!(mine, (0..10).collect::<Vec<_>>());
        assert_eq!(other, (100..109).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_receiver_is_gone() {
        let (mut a, rx) = channel::<u32>(2, 1);
        let h = std::thread::spawn(move || rx.each(|&x| if x == 3 { Err(x) } else { Ok(()) }));
        let mut r = Ok(());
        for i in 0..100 {
            r = a.push(i);
            if r.is_err() {
                break;
            }
        }
        assert_eq!(r, Err(Gone));
        assert_eq!(h.join().unwrap(), Err(3));
    }
}
