//! Command-line arguments: a command, then `--name value` options and `--flag` switches.

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// The first argument.
    pub command: String,
    options: HashMap<String, String>,
}

impl Args {
    /// Parses `command --name value --flag ...`. A `--name` followed by another `--…` or
    /// by nothing is a switch (value `"true"`).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut iter = args.into_iter().peekable();
        let command = iter.next().ok_or("missing command")?;
        let mut options = HashMap::new();
        while let Some(arg) = iter.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            let value = match iter.peek() {
                Some(next) if !next.starts_with("--") => iter.next().unwrap_or_default(),
                _ => "true".to_owned(),
            };
            options.insert(name.to_owned(), value);
        }
        Ok(Args { command, options })
    }

    /// Sets `--name` (a value a scenario passes on to its consumers).
    pub fn set(&mut self, name: &str, value: &str) {
        self.options.insert(name.to_owned(), value.to_owned());
    }

    /// The raw value of `--name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// `--name` parsed, or `default` when absent.
    pub fn value<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .replace('_', "")
                .parse()
                .map_err(|_| format!("invalid value {v:?} for --{name}")),
        }
    }

    /// `--name` as a comma-separated list, or `default`.
    pub fn list(&self, name: &str, default: &[&str]) -> Vec<String> {
        match self.get(name) {
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            None => default.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Whether the switch `--name` was given (and not `false`).
    pub fn flag(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v != "false")
    }

    /// The required value of `--name`.
    pub fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required"))
    }
}
