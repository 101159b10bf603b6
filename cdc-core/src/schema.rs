//! Table schemas as the source describes them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{TableName, TypeOid};

/// What a table's replica identity makes Postgres log as the old row of updates and
/// deletes (`pg_class.relreplident`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaIdentity {
    /// `d`: the primary key columns (nothing if there is no primary key).
    Default,
    /// `n`: nothing; updates and deletes carry no old row.
    Nothing,
    /// `f`: the full old row.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    /// From the `relreplident` character (`d`, `n`, `f`, `i`).
    pub fn from_char(c: u8) -> Option<Self> {
        match c {
            b'd' => Some(ReplicaIdentity::Default),
            b'n' => Some(ReplicaIdentity::Nothing),
            b'f' => Some(ReplicaIdentity::Full),
            b'i' => Some(ReplicaIdentity::Index),
            _ => None,
        }
    }

    /// The `relreplident` character.
    pub fn as_char(self) -> u8 {
        match self {
            ReplicaIdentity::Default => b'd',
            ReplicaIdentity::Nothing => b'n',
            ReplicaIdentity::Full => b'f',
            ReplicaIdentity::Index => b'i',
        }
    }
}

/// A column's type: its OID and modifier plus, where known, its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColumnType {
    /// `pg_type.oid`.
    pub oid: TypeOid,
    /// `atttypmod` (-1 when none): length of `varchar(n)` + 4, precision/scale of numeric, …
    pub modifier: i32,
    /// Qualified type name when the source knows it (e.g. `pg_catalog.int4`,
    /// `public.mood`); used in messages and by sinks choosing a representation.
    pub name: Option<String>,
    /// What the catalog says of a domain or an enum (its base type, its labels), for
    /// sinks whose schemas name them; [`TypeDefinition::Plain`] otherwise. Not part of
    /// the layout: two schemas that differ only here read rows alike.
    #[serde(default, skip_serializing_if = "TypeDefinition::is_plain")]
    pub definition: TypeDefinition,
}

/// What the catalog says of a type beyond its OID, where a sink's schema needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TypeDefinition {
    /// A built-in type, or one nothing more is known of.
    #[default]
    Plain,
    /// A domain: its values are of type `base` (a domain over a domain followed to the
    /// type that is not one).
    Domain {
        /// The type the values have.
        base: TypeOid,
    },
    /// An enum, with its labels in sort order.
    Enum {
        /// `pg_enum.enumlabel` by `enumsortorder`.
        labels: Vec<String>,
    },
}

impl TypeDefinition {
    /// Whether nothing beyond the OID is known.
    pub fn is_plain(&self) -> bool {
        matches!(self, TypeDefinition::Plain)
    }
}

/// One column of a table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColumnSchema {
    /// Column name as stored (case preserved).
    pub name: String,
    /// Its type.
    pub column_type: ColumnType,
    /// Whether the column may be NULL. Sources that cannot tell report `true`.
    pub nullable: bool,
    /// Whether the column is part of the replica identity key (for `REPLICA IDENTITY
    /// DEFAULT` the primary key, for `INDEX` the index's columns; for `FULL`, every
    /// column, as Postgres reports it).
    pub part_of_key: bool,
    /// A stored generated column (`GENERATED ALWAYS AS (...) STORED`), delivered when the
    /// publication publishes it (PostgreSQL 18's `publish_generated_columns = stored`, or
    /// a column list naming it). Its values are computed by Postgres, not written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub generated: bool,
}

/// A table's schema as of some point in the stream. Shared as `Arc` by every event that
/// carries rows of the table; a changed schema is a new `TableSchema` (and a schema change
/// event), never an in-place mutation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableSchema {
    /// The table's qualified name.
    pub name: TableName,
    /// The source's identifier for the relation (Postgres: `pg_class.oid`).
    pub relation_id: u32,
    /// Columns in the order rows carry their values.
    pub columns: Vec<ColumnSchema>,
    /// The table's replica identity.
    pub replica_identity: ReplicaIdentity,
    /// Names of the primary key columns, in key order, when the table has a primary key
    /// and the source knows it; empty otherwise.
    pub primary_key: Vec<String>,
}

/// A shared table schema.
pub type SchemaRef = Arc<TableSchema>;

impl TableSchema {
    /// Index of the column named `name` (exact, case-sensitive match).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Indexes of the columns that identify a row: the primary key when known, else the
    /// replica identity key columns. Empty when rows cannot be identified (no key and
    /// replica identity `FULL` or `NOTHING` without a primary key).
    pub fn key_indexes(&self) -> Vec<usize> {
        if !self.primary_key.is_empty() {
            return self
                .primary_key
                .iter()
                .filter_map(|k| self.column_index(k))
                .collect();
        }
        if self.replica_identity == ReplicaIdentity::Full {
            return Vec::new();
        }
        self.columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.part_of_key)
            .map(|(i, _)| i)
            .collect()
    }

    /// Differences between `self` (old) and `new`, each as a human-readable line, for
    /// schema-change errors and events. Empty when the schemas are equal in every way a
    /// row's layout depends on.
    pub fn differences(&self, new: &TableSchema) -> Vec<String> {
        let mut out = Vec::new();
        if self.name != new.name {
            out.push(format!("renamed from {} to {}", self.name, new.name));
        }
        if self.replica_identity != new.replica_identity {
            out.push(format!(
                "replica identity changed from {:?} to {:?}",
                self.replica_identity, new.replica_identity
            ));
        }
        for (i, old_col) in self.columns.iter().enumerate() {
            match new.columns.get(i) {
                None => out.push(format!("column {:?} dropped", old_col.name)),
                Some(new_col) if new_col.name != old_col.name => {
                    if new.column_index(&old_col.name).is_none() {
                        out.push(format!(
                            "column {} {:?} is now {:?} (renamed or dropped)",
                            i + 1,
                            old_col.name,
                            new_col.name
                        ));
                    } else {
                        out.push(format!("column {:?} moved", old_col.name));
                    }
                }
                Some(new_col) => {
                    if new_col.column_type.oid != old_col.column_type.oid
                        || new_col.column_type.modifier != old_col.column_type.modifier
                    {
                        out.push(format!(
                            "column {:?} changed type from {} to {}",
                            old_col.name,
                            describe_type(&old_col.column_type),
                            describe_type(&new_col.column_type)
                        ));
                    }
                    if new_col.part_of_key != old_col.part_of_key {
                        out.push(format!("column {:?} changed key membership", old_col.name));
                    }
                }
            }
        }
        for new_col in new.columns.iter().skip(self.columns.len()) {
            out.push(format!("column {:?} added", new_col.name));
        }
        out
    }
}

fn describe_type(t: &ColumnType) -> String {
    match &t.name {
        Some(name) => format!("{name} (oid {}, typmod {})", t.oid, t.modifier),
        None => format!("oid {} (typmod {})", t.oid, t.modifier),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, oid: u32, key: bool) -> ColumnSchema {
        ColumnSchema {
            name: name.into(),
            column_type: ColumnType {
                oid,
                modifier: -1,
                name: None,
                definition: Default::default(),
            },
            nullable: true,
            part_of_key: key,
            generated: false,
        }
    }

    fn schema(columns: Vec<ColumnSchema>) -> TableSchema {
        TableSchema {
            name: TableName::new("public", "t"),
            relation_id: 1,
            columns,
            replica_identity: ReplicaIdentity::Default,
            primary_key: vec![],
        }
    }

    #[test]
    fn detects_added_dropped_and_retyped_columns() {
        let old = schema(vec![col("id", 23, true), col("a", 25, false)]);
        assert!(old.differences(&old).is_empty());
        let added = schema(vec![
            col("id", 23, true),
            col("a", 25, false),
            col("b", 16, false),
        ]);
        assert_eq!(old.differences(&added), vec!["column \"b\" added"]);
        let dropped = schema(vec![col("id", 23, true)]);
        assert_eq!(old.differences(&dropped), vec!["column \"a\" dropped"]);
        let retyped = schema(vec![col("id", 20, true), col("a", 25, false)]);
        assert!(old.differences(&retyped)[0].contains("changed type"));
    }

    #[test]
    fn key_from_replica_identity_columns() {
        let s = schema(vec![col("id", 23, true), col("a", 25, false)]);
        assert_eq!(s.key_indexes(), vec![0]);
    }
}
