//! Work over many shards or slices with a few threads: each thread takes
//! the next item until none is left, and results come back in item order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The online CPUs, the default number of threads.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `f(index, item)` for every item, on up to `threads` threads; the
/// results in item order. The first error stops every thread from taking
/// another item and is returned. A panic in `f` is resumed here.
pub fn try_map<T, R, E>(
    items: &[T],
    threads: usize,
    f: impl Fn(usize, &T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
{
    let threads = threads.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<(usize, Result<R, E>)>> = Mutex::new(Vec::with_capacity(items.len()));
    let work = || {
        while !failed.load(Ordering::Relaxed) {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(index) else { break };
            let result = f(index, item);
            failed.fetch_or(result.is_err(), Ordering::Relaxed);
            results
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((index, result));
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            for handle in handles {
                if let Err(panic) = handle.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        });
    }
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|&(index, _)| index);
    results.into_iter().map(|(_, result)| result).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_item_order_and_the_first_error_stops_the_rest() {
        let items: Vec<u32> = (0..1000).collect();
        let doubled = try_map(&items, 4, |_, &i| Ok::<_, ()>(i * 2)).unwrap();
        assert_eq!(doubled, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let taken = AtomicUsize::new(0);
        let failed = try_map(&items, 3, |index, _| {
            taken.fetch_add(1, Ordering::Relaxed);
            if index == 10 {
                Err(index)
            } else {
                Ok(())
            }
        });
        assert_eq!(failed, Err(10));
        assert!(taken.load(Ordering::Relaxed) < 100);
    }
}
