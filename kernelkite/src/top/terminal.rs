//! The terminal while `top` runs: raw mode and the alternate screen, always undone —
//! by the guard's drop (quit, error), by a panic hook (panic), and after SIGTERM, SIGHUP
//! or SIGINT, which only set a flag the event loop checks at least every 100 ms
//! (SIGWINCH sets another: redraw at the new size).

use std::io::{self, IsTerminal, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use anyhow::{bail, Context, Result};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::{CompletedFrame, Frame, Terminal};

/// Whether the terminal is currently set up (so restoring twice does nothing).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static PANIC_HOOK: Once = Once::new();

/// Undo raw mode and the alternate screen, if they are on. Safe to call any number of
/// times, from a panic hook too.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

/// The terminal in raw mode on the alternate screen; dropping it restores the terminal.
pub struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    pub fn enter() -> Result<TerminalGuard> {
        if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
            bail!("top needs a terminal (standard input and output must be a tty)");
        }
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                // Restore first, so the panic message lands on a usable terminal.
                restore();
                previous(info);
            }));
        });
        enable_raw_mode().context("switching the terminal to raw mode")?;
        ACTIVE.store(true, Ordering::SeqCst);
        let mut out = io::stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, Hide) {
            restore();
            return Err(e).context("entering the alternate screen");
        }
        let terminal = match Terminal::new(CrosstermBackend::new(out)) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e).context("setting up the terminal");
            }
        };
        Ok(TerminalGuard { terminal })
    }

    /// Draw one frame (ratatui resizes its buffers to the terminal's size first).
    pub fn draw<F: FnOnce(&mut Frame<'_>)>(&mut self, render: F) -> Result<CompletedFrame<'_>> {
        self.terminal.draw(render).context("drawing the screen")
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// SIGTERM, SIGHUP and SIGINT set a flag instead of killing the process mid-frame; the
/// event loop sees it and returns, and the guard restores the terminal.
pub struct StopSignals;

static STOP: AtomicBool = AtomicBool::new(false);
static RESIZED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: async-signal-safe.
    if sig == libc::SIGWINCH {
        RESIZED.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

impl StopSignals {
    pub fn install() -> Result<StopSignals> {
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGWINCH] {
            // SAFETY: the handler only stores to an atomic; the sigaction struct is
            // zeroed and then filled in before use.
            let rc = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                // poll(2) still returns EINTR (input::wait: idle), so the loop sees the
                // flag at once; other calls restart.
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(io::Error::last_os_error()).context("installing signal handlers");
            }
        }
        Ok(StopSignals)
    }

    pub fn stop_requested(&self) -> bool {
        STOP.load(Ordering::SeqCst)
    }

    /// Whether the terminal was resized since the last call (SIGWINCH).
    pub fn take_resized(&self) -> bool {
        RESIZED.swap(false, Ordering::SeqCst)
    }
}
