//! /proc sampler (see issue: foundation).
