//! net_stress: a loopback TCP echo. A server thread listens on 127.0.0.1 (ephemeral
//! port) and echoes; the main thread sends `--count M` (default 10,000) messages of
//! `--size B` bytes (default 64), each time waiting for the echo. Both threads mostly
//! block in socket syscalls waiting for each other (syscall_blocked).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 10_000)?;
    let size = args.usize("size", 64)?.max(1);
    let start = crate::gate(args)?;

    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let server = std::thread::Builder::new()
        .name("echo-server".into())
        .spawn(move || -> Result<u64, String> {
            let (mut conn, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
            conn.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; size];
            let mut echoed = 0u64;
            loop {
                match conn.read_exact(&mut buf) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(format!("server read: {e}")),
                }
                conn.write_all(&buf)
                    .map_err(|e| format!("server write: {e}"))?;
                echoed += 1;
            }
            Ok(echoed)
        })
        .map_err(|e| format!("spawning thread: {e}"))?;

    start.wait()?;
    let t0 = Instant::now();
    let mut client =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    client.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    for i in 0..count {
        msg[0] = i as u8;
        client
            .write_all(&msg)
            .map_err(|e| format!("client write: {e}"))?;
        client
            .read_exact(&mut back)
            .map_err(|e| format!("client read: {e}"))?;
        if back != msg {
            return Err(format!("message {i} came back different").into());
        }
    }
    client
        .shutdown(Shutdown::Write)
        .map_err(|e| e.to_string())?;
    let echoed = server
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
    let elapsed = crate::elapsed_ns(t0);

    Report::new("net_stress")
        .u64("messages", count)
        .u64("echoed", echoed)
        .u64("message_size", size as u64)
        .u64("bytes_each_way", count * size as u64)
        .u64("port", port as u64)
        .u64("elapsed_ns", elapsed)
        .f64("ns_per_round_trip", elapsed as f64 / count.max(1) as f64)
        .print();
    Ok(())
}
