//! libpq's password file (`~/.pgpass`, or the file `PGPASSFILE` names): its format, the
//! lookup, and reading it with libpq's permission check.
//!
//! Each line is `hostname:port:database:username:password`. A field that is exactly `*`
//! matches anything; `\:` and `\\` stand for `:` and `\` (a backslash escapes any
//! character). The first line whose four fields match wins; lines starting with `#`, and
//! lines with fewer than five fields, are skipped; the password ends at the first
//! unescaped `:`. The host name searched for is the `host` parameter (a Unix socket
//! directory as written), else `hostaddr`, else `localhost` (pgcdc's default host).
//!
//! As libpq does, a file that is not a plain file, or that the group or others may read,
//! write or execute (any of the mode bits `0o077`), is ignored with a warning: a password
//! file others can read is no secret. A missing file is no error.

use std::fmt;
use std::path::Path;

use super::secret::Secret;

/// A parsed password file. `Debug` shows the number of entries only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PassFile {
    entries: Vec<Entry>,
}

#[derive(Clone, PartialEq, Eq)]
struct Entry {
    host: Field,
    port: Field,
    dbname: Field,
    user: Field,
    password: Secret,
}

/// One of the four matched fields.
#[derive(Clone, PartialEq, Eq)]
enum Field {
    /// `*`.
    Any,
    /// The field's text, unescaped.
    Exact(String),
}

impl Field {
    fn matches(&self, value: &str) -> bool {
        match self {
            Field::Any => true,
            Field::Exact(text) => text == value,
        }
    }
}

impl fmt::Debug for PassFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassFile")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl PassFile {
    /// Parses the contents of a password file. Never fails: lines libpq would not match
    /// are skipped.
    pub fn parse(contents: &str) -> PassFile {
        let entries = contents
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(parse_line)
            .collect();
        PassFile { entries }
    }

    /// The password of the first entry that matches, if any.
    pub fn lookup(&self, host: &str, port: u16, dbname: &str, user: &str) -> Option<&Secret> {
        let port = port.to_string();
        self.entries
            .iter()
            .find(|e| {
                e.host.matches(host)
                    && e.port.matches(&port)
                    && e.dbname.matches(dbname)
                    && e.user.matches(user)
            })
            .map(|e| &e.password)
    }

    /// Whether the file has no usable entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Splits a line at unescaped `:` into its fields, unescaping them: `(text, was it exactly
/// an unescaped *)`. `lines()` has removed the `\n`; a `\r` before it goes too.
fn parse_line(line: &str) -> Option<Entry> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields: Vec<(String, bool)> = Vec::with_capacity(5);
    let mut text = String::new();
    let mut escaped_any = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            // libpq keeps a backslash that ends the line.
            '\\' => match chars.next() {
                Some(next) => {
                    text.push(next);
                    escaped_any = true;
                }
                None => text.push('\\'),
            },
            // The password (the fifth field) ends at the first unescaped ':'.
            ':' if fields.len() == 4 => break,
            ':' => {
                fields.push((std::mem::take(&mut text), escaped_any));
                escaped_any = false;
            }
            c => text.push(c),
        }
    }
    if fields.len() < 4 {
        return None;
    }
    let field = |(text, escaped): (String, bool)| {
        if text == "*" && !escaped {
            Field::Any
        } else {
            Field::Exact(text)
        }
    };
    let mut fields = fields.into_iter().map(field);
    Some(Entry {
        host: fields.next()?,
        port: fields.next()?,
        dbname: fields.next()?,
        user: fields.next()?,
        password: Secret::new(text),
    })
}

/// Reads the password file at `path`, as libpq does: `None`, silently, when it cannot be
/// read (it need not exist); `None` with a warning when it is not a plain file, when its
/// permissions let the group or others at it, or when it is not UTF-8.
pub fn read_pass_file(path: &Path) -> Option<PassFile> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "no password file");
            return None;
        }
    };
    if !metadata.is_file() {
        tracing::warn!(
            "password file {} is not a plain file; ignored",
            path.display()
        );
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "password file {} has group or world access; ignored: its permissions should be u=rw (0600) or less",
                path.display()
            );
            return None;
        }
    }
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(contents) => Some(PassFile::parse(&contents)),
            Err(_) => {
                tracing::warn!(
                    "password file {} is not valid UTF-8; ignored",
                    path.display()
                );
                None
            }
        },
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "password file not readable");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn password<'a>(
        file: &'a PassFile,
        host: &str,
        port: u16,
        db: &str,
        user: &str,
    ) -> Option<&'a str> {
        file.lookup(host, port, db, user).map(Secret::expose)
    }

    #[test]
    fn first_matching_line_wins_and_wildcards_match_anything() {
        let file = PassFile::parse(
            "# comment\n\
             db.example:5432:shop:cdc:exact\n\
             db.example:*:*:cdc:any-port-any-db\n\
             *:*:*:*:fallback\n",
        );
        assert_eq!(
            password(&file, "db.example", 5432, "shop", "cdc"),
            Some("exact")
        );
        assert_eq!(
            password(&file, "db.example", 6432, "other", "cdc"),
            Some("any-port-any-db")
        );
        assert_eq!(password(&file, "elsewhere", 1, "x", "y"), Some("fallback"));
        let file = PassFile::parse("db:5432:shop:cdc:pw\n");
        assert_eq!(password(&file, "db", 5433, "shop", "cdc"), None);
        assert_eq!(password(&file, "db", 5432, "shop", "other"), None);
    }

    #[test]
    fn escapes_follow_libpq() {
        let file = PassFile::parse(
            "/run/pg\\:sock:5432:db\\\\name:us\\:er:pa\\:ss\\\\word:ignored\n\
             \\*:5432:db:u:escaped-star\n\
             *:5432:db:u:star\r\n",
        );
        assert_eq!(
            password(&file, "/run/pg:sock", 5432, "db\\name", "us:er"),
            Some("pa:ss\\word"),
            "the password ends at the first unescaped ':'"
        );
        // `\*` is a literal '*', not a wildcard.
        assert_eq!(password(&file, "*", 5432, "db", "u"), Some("escaped-star"));
        assert_eq!(password(&file, "host", 5432, "db", "u"), Some("star"));
    }

    #[test]
    fn short_and_empty_lines_are_skipped() {
        let file = PassFile::parse("\n#*:*:*:*:commented\nhost:5432:db:user\n*:*:*:*:\n");
        // The last line's password is empty, as libpq reads it.
        assert_eq!(password(&file, "h", 1, "d", "u"), Some(""));
        assert!(PassFile::parse("a:b:c\n# x\n").is_empty());
    }

    #[test]
    fn debug_shows_no_password() {
        let file = PassFile::parse("*:*:*:*:hunter2\n");
        let text = format!("{file:?} {file:#?}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn files_others_may_read_are_ignored() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:from-file\n").unwrap();
        for (mode, usable) in [
            (0o600, true),
            (0o400, true),
            (0o644, false),
            (0o640, false),
            (0o604, false),
            (0o610, false),
        ] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let file = read_pass_file(&path);
            assert_eq!(file.is_some(), usable, "mode {mode:o}");
            if let Some(file) = file {
                assert_eq!(password(&file, "h", 1, "d", "u"), Some("from-file"));
            }
        }
        assert!(read_pass_file(&dir.path().join("missing")).is_none());
        assert!(read_pass_file(dir.path()).is_none(), "a directory");
    }
}
