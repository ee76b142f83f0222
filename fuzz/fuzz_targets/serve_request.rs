//! Any bytes a client sends to `trace --serve` get one well-formed HTTP response,
//! never a panic, and the response the request parser says: the parser directly, and
//! the whole responder over a real loopback connection.

#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;

use kernelkite::export::serve::{self, parse_request, Request};
use libfuzzer_sys::fuzz_target;

const BODY: &str = "# fuzz exposition\n";

/// A `serve` responder on a loopback port, answering scrapes with [`BODY`], running for
/// the whole fuzzing process.
fn server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let listener = serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<serve::Scrape>(16);
                // Profiles off, as `trace --serve` runs it: their path is a 404.
                tokio::spawn(serve::serve(listener, tx, false));
                while let Some(ask) = rx.recv().await {
                    if let serve::Ask::Metrics(reply) = ask {
                        let _ = reply.send(BODY.to_string());
                    }
                }
            });
        });
        addr
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = parse_request(data);
    // Send one head the responder reads to its end (a head with its blank line, or at
    // most MAX_HEAD_BYTES without one), so closing never resets unread bytes.
    let (sent, head) = match data.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(end) if end + 4 <= serve::MAX_HEAD_BYTES => (&data[..end + 4], &data[..end]),
        _ => {
            let n = data.len().min(serve::MAX_HEAD_BYTES);
            (&data[..n], &data[..n])
        }
    };
    let mut stream = TcpStream::connect(server()).unwrap();
    stream.write_all(sent).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8(answer).expect("the responder writes text");
    let status = answer.lines().next().unwrap_or("");
    let want = match parse_request(head) {
        Request::Metrics { .. } => "HTTP/1.1 200 OK",
        Request::NotFound | Request::Profile { .. } => "HTTP/1.1 404 Not Found",
        Request::MethodNotAllowed => "HTTP/1.1 405 Method Not Allowed",
    };
    assert_eq!(status, want, "response to {head:?}");
    if matches!(parse_request(head), Request::Metrics { with_body: true }) {
        assert!(answer.ends_with(BODY), "the exposition follows the head");
    }
});
