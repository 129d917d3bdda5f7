//! phyllo-analyze
