//! Renderers: pure functions from analyses to bytes (text, JSON, HTML), one file per format.

pub mod html;
pub mod timeline;
pub mod viewer;
