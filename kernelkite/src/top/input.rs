//! Keyboard input read straight from the terminal (standard input, in raw mode) with
//! poll(2), so a terminal that goes away is seen at once: a hang-up, an error or end of
//! file ends `top` instead of leaving it spinning on a dead tty (crossterm's reader
//! retries a read that returns end of file forever). Keys are decoded here from the
//! bytes a terminal sends (UTF-8 text, control characters, CSI/SS3 escape sequences).

use std::io;
use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What waiting for input produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    Keys(Vec<KeyEvent>),
    /// Nothing arrived before the timeout (or a signal interrupted the wait).
    Idle,
    /// The terminal hung up, failed, or reached end of file.
    Closed,
}

/// Wait up to `timeout` for keys on standard input.
pub fn wait(timeout: Duration) -> io::Result<Input> {
    let mut pfd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd, count 1.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(Input::Idle)
        } else {
            Err(e)
        };
    }
    if n == 0 {
        return Ok(Input::Idle);
    }
    if pfd.revents & libc::POLLIN == 0 {
        // POLLHUP, POLLERR or POLLNVAL with nothing left to read.
        return Ok(Input::Closed);
    }
    let mut buf = [0u8; 1024];
    // SAFETY: reading into a buffer we own, at most its length.
    let got = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
    if got < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => Ok(Input::Idle),
            // EIO: the terminal's other side is gone.
            _ => Ok(Input::Closed),
        };
    }
    if got == 0 {
        return Ok(Input::Closed);
    }
    Ok(Input::Keys(decode(&buf[..got as usize])))
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// Decode the bytes of one read into key presses. Unknown escape sequences are dropped.
pub fn decode(bytes: &[u8]) -> Vec<KeyEvent> {
    let mut keys = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            0x1b => {
                let (consumed, decoded) = escape(&bytes[i..]);
                keys.extend(decoded);
                i += consumed;
            }
            b'\r' | b'\n' => {
                keys.push(key(KeyCode::Enter));
                i += 1;
            }
            0x7f | 0x08 => {
                keys.push(key(KeyCode::Backspace));
                i += 1;
            }
            b'\t' => {
                keys.push(key(KeyCode::Tab));
                i += 1;
            }
            0x00..=0x1f => {
                // Ctrl-A .. Ctrl-Z (Ctrl-C is 0x03).
                keys.push(KeyEvent::new(
                    KeyCode::Char((b + 0x60) as char),
                    KeyModifiers::CONTROL,
                ));
                i += 1;
            }
            _ => {
                // One UTF-8 character (a broken one becomes U+FFFD).
                let len = match b {
                    0xf0..=0xf7 => 4,
                    0xe0..=0xef => 3,
                    0xc0..=0xdf => 2,
                    _ => 1,
                }
                .min(bytes.len() - i);
                let c = std::str::from_utf8(&bytes[i..i + len])
                    .ok()
                    .and_then(|s| s.chars().next())
                    .unwrap_or(char::REPLACEMENT_CHARACTER);
                keys.push(key(KeyCode::Char(c)));
                i += len;
            }
        }
    }
    keys
}

/// Decode an escape sequence at the start of `bytes` (which starts with ESC): how many
/// bytes it used and the key, if it is one `top` knows.
fn escape(bytes: &[u8]) -> (usize, Option<KeyEvent>) {
    match bytes.get(1) {
        // A lone Esc (or Esc, Esc).
        None | Some(0x1b) => (1, Some(key(KeyCode::Esc))),
        Some(b'[') | Some(b'O') => {
            // CSI / SS3: parameter bytes, then one final byte in 0x40..=0x7e.
            let Some(end) = bytes[2..].iter().position(|b| (0x40..=0x7e).contains(b)) else {
                return (bytes.len(), None);
            };
            let params = &bytes[2..2 + end];
            let fin = bytes[2 + end];
            let code = match fin {
                b'A' => Some(KeyCode::Up),
                b'B' => Some(KeyCode::Down),
                b'C' => Some(KeyCode::Right),
                b'D' => Some(KeyCode::Left),
                b'H' => Some(KeyCode::Home),
                b'F' => Some(KeyCode::End),
                b'P' => Some(KeyCode::F(1)),
                b'~' => match params {
                    b"1" | b"7" => Some(KeyCode::Home),
                    b"4" | b"8" => Some(KeyCode::End),
                    b"5" => Some(KeyCode::PageUp),
                    b"6" => Some(KeyCode::PageDown),
                    b"3" => Some(KeyCode::Delete),
                    b"11" => Some(KeyCode::F(1)),
                    _ => None,
                },
                _ => None,
            };
            (3 + end, code.map(key))
        }
        // Alt+key: Esc then the key.
        Some(_) => (1, Some(key(KeyCode::Esc))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(bytes: &[u8]) -> Vec<KeyCode> {
        decode(bytes).into_iter().map(|k| k.code).collect()
    }

    #[test]
    fn decodes_text_controls_and_escape_sequences() {
        assert_eq!(
            codes(b"w/ab\r"),
            vec![
                KeyCode::Char('w'),
                KeyCode::Char('/'),
                KeyCode::Char('a'),
                KeyCode::Char('b'),
                KeyCode::Enter
            ]
        );
        assert_eq!(
            codes(b"\x1b[A\x1b[B\x1bOC\x1b[D\x1b[5~\x1b[6~\x1b[H\x1b[4~"),
            vec![
                KeyCode::Up,
                KeyCode::Down,
                KeyCode::Right,
                KeyCode::Left,
                KeyCode::PageUp,
                KeyCode::PageDown,
                KeyCode::Home,
                KeyCode::End
            ]
        );
        assert_eq!(codes(b"\x1b"), vec![KeyCode::Esc]);
        assert_eq!(codes(b"\x7f"), vec![KeyCode::Backspace]);
        let ctrl_c = decode(b"\x03");
        assert_eq!(ctrl_c[0].code, KeyCode::Char('c'));
        assert!(ctrl_c[0].modifiers.contains(KeyModifiers::CONTROL));
        assert_eq!(codes("é".as_bytes()), vec![KeyCode::Char('é')]);
        // Unknown or cut-off sequences are dropped, the rest still decodes.
        assert_eq!(codes(b"\x1b[99zq"), vec![KeyCode::Char('q')]);
        assert_eq!(codes(b"q\x1b[12"), vec![KeyCode::Char('q')]);
        assert_eq!(
            codes(&[0xff]),
            vec![KeyCode::Char(char::REPLACEMENT_CHARACTER)]
        );
    }
}
