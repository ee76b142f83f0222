//! Self-contained HTML report.
