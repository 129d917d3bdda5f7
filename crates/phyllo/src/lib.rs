//! phyllo
