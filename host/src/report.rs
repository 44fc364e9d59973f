//! Findings of both formats rendered one way (filled in below).
