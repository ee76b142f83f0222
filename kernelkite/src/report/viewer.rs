//! Viewer timeline document.
