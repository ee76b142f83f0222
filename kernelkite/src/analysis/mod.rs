//! Pure functions from a bundle to derived numbers. Nothing here reads the system.
