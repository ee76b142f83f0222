//! Rust std's Mutex and File::sync_all, built by tests/ebpf_stacks.rs with `rustc -O -g`
//! (std itself comes prebuilt without frame pointers):
//!
//!   stdwork mutex SECONDS      the waiter's lock_wait is under kk_rust_lock_caller
//!   stdwork sync DIR SECONDS   io_wait under kk_rust_sync_caller -> File::sync_all
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static LOCK: Mutex<u64> = Mutex::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

#[no_mangle]
#[inline(never)]
pub extern "C" fn kk_rust_lock_caller() {
    *LOCK.lock().unwrap() += 1;
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn kk_rust_lock_holder() {
    let _held = LOCK.lock().unwrap();
    std::thread::sleep(Duration::from_millis(5));
}

#[no_mangle]
#[inline(never)]
pub fn kk_rust_sync_caller(file: &mut std::fs::File, page: &[u8]) {
    file.write_all(page).unwrap();
    file.sync_all().unwrap();
    std::hint::black_box(file);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("mutex") => {
            let seconds: f64 = args[2].parse().unwrap();
            let holder = std::thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    kk_rust_lock_holder();
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            let waiter = std::thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    kk_rust_lock_caller();
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            std::thread::sleep(Duration::from_secs_f64(seconds));
            STOP.store(true, Ordering::Relaxed);
            holder.join().unwrap();
            waiter.join().unwrap();
        }
        Some("sync") => {
            let path = std::path::Path::new(&args[2]).join(format!("stdwork-{}", std::process::id()));
            let mut file = std::fs::File::create(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            let page = [b'k'; 4096];
            let until = Instant::now() + Duration::from_secs_f64(args[3].parse().unwrap());
            while Instant::now() < until {
                kk_rust_sync_caller(&mut file, &page);
            }
        }
        _ => {
            eprintln!("usage: stdwork mutex SECONDS | stdwork sync DIR SECONDS");
            std::process::exit(2);
        }
    }
}
