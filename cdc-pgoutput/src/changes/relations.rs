//! The relation cache: pgoutput Relation messages → shared `TableSchema`s, with schema
//! change detection and routing of relations to configured tables.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cdc_core::{ColumnSchema, ColumnType, Error, SchemaRef, TableName, TableSchema};

use crate::protocol::pgoutput::Relation;
use crate::types::{TypeInfo, TypeRegistry};

/// What to do when a Relation message differs from the schema already known for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaChangePolicy {
    /// Stop with an error naming the table and the difference, before any row under the
    /// new schema is emitted (default).
    #[default]
    Fail,
    /// Emit a schema change event, then rows under the new schema.
    Evolve,
}

/// Catalog facts the Relation message does not carry: nullability and the primary key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCatalogInfo {
    /// Columns declared NOT NULL.
    pub not_null: HashSet<String>,
    /// Primary key columns in key order (empty without a primary key).
    pub primary_key: Vec<String>,
    /// Stored generated columns (the Relation message does not mark them).
    pub generated: HashSet<String>,
}

/// Which tables the stream delivers, and under which name.
///
/// A relation is delivered when its own name is configured, or when it is a partition
/// whose configured root is known (`partition_roots`): then its rows are delivered under
/// the root's name, whichever way the publication publishes partitions.
#[derive(Clone, Debug, Default)]
pub struct TableRouting {
    configured: HashSet<TableName>,
    partition_roots: HashMap<TableName, TableName>,
    /// `None`: every table of the publication is delivered.
    all_tables: bool,
    catalog: HashMap<TableName, TableCatalogInfo>,
}

impl TableRouting {
    /// Delivers exactly `tables`.
    pub fn tables(tables: impl IntoIterator<Item = TableName>) -> Self {
        TableRouting {
            configured: tables.into_iter().collect(),
            ..TableRouting::default()
        }
    }

    /// Delivers every table the publication sends.
    pub fn all() -> Self {
        TableRouting {
            all_tables: true,
            ..TableRouting::default()
        }
    }

    /// Declares `partition` to belong to the configured table `root`.
    pub fn with_partition(mut self, partition: TableName, root: TableName) -> Self {
        self.partition_roots.insert(partition, root);
        self
    }

    /// Adds catalog facts for `table`.
    pub fn with_catalog(mut self, table: TableName, info: TableCatalogInfo) -> Self {
        self.catalog.insert(table, info);
        self
    }

    /// The name rows of `relation` are delivered under, or `None` if not configured.
    pub fn route(&self, relation: &TableName) -> Option<TableName> {
        if let Some(root) = self.partition_roots.get(relation)
            && (self.all_tables || self.configured.contains(root))
        {
            return Some(root.clone());
        }
        (self.all_tables || self.configured.contains(relation)).then(|| relation.clone())
    }
}

/// One known relation.
#[derive(Clone, Debug)]
pub struct CachedRelation {
    /// The schema events carry (under the routed name), or `None` when the relation is not
    /// configured and its rows are skipped.
    pub schema: Option<SchemaRef>,
    /// Type of each column, resolved once.
    pub column_types: Arc<[TypeInfo]>,
}

/// What registering a Relation message did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelationUpdate {
    /// First sight, or identical to what was known.
    Unchanged,
    /// The schema changed and the policy is `Evolve`: emit a schema change event.
    Changed {
        /// The schema before.
        old: SchemaRef,
        /// The schema from now on.
        new: SchemaRef,
    },
}

/// Relation id → schema, for the lifetime of one replication session (pgoutput sends a
/// Relation message before the first change of each relation in a session, and again when
/// the relation changes).
#[derive(Debug, Default)]
pub struct RelationCache {
    relations: HashMap<u32, CachedRelation>,
    routing: TableRouting,
    policy: SchemaChangePolicy,
    types: TypeRegistry,
    /// Last schema delivered per routed table name, across sessions of this cache: a
    /// schema change is detected even when the relation id is new (e.g. after reconnect,
    /// or a partition attached).
    delivered: HashMap<TableName, SchemaRef>,
}

impl RelationCache {
    /// An empty cache.
    pub fn new(routing: TableRouting, policy: SchemaChangePolicy) -> Self {
        RelationCache {
            routing,
            policy,
            ..RelationCache::default()
        }
    }

    /// The type registry, extended by Type messages.
    pub fn types_mut(&mut self) -> &mut TypeRegistry {
        &mut self.types
    }

    /// Forgets relation ids (a new replication session starts), keeping the delivered
    /// schemas so a change across sessions is still detected.
    pub fn reset_session(&mut self) {
        self.relations.clear();
    }

    /// Seeds the schema last delivered for a table (e.g. the schema a snapshot used), so
    /// that the stream's first Relation message is compared against it.
    pub fn seed_delivered(&mut self, schema: SchemaRef) {
        self.delivered.insert(schema.name.clone(), schema);
    }

    /// The relation, or `None` if no Relation message was seen for it.
    pub fn get(&self, relation_id: u32) -> Option<&CachedRelation> {
        self.relations.get(&relation_id)
    }

    /// Registers a Relation message. With the `Fail` policy a difference from the known
    /// schema is a `Config` error naming the table and the differences.
    pub fn register(&mut self, relation: &Relation) -> Result<RelationUpdate, Error> {
        let own_name = TableName::new(relation.schema(), relation.name.clone());
        let column_types: Arc<[TypeInfo]> = relation
            .columns
            .iter()
            .map(|c| self.types.resolve(c.type_oid))
            .collect();
        let Some(routed) = self.routing.route(&own_name) else {
            self.relations.insert(
                relation.relation_id,
                CachedRelation {
                    schema: None,
                    column_types,
                },
            );
            return Ok(RelationUpdate::Unchanged);
        };
        let catalog = self
            .routing
            .catalog
            .get(&routed)
            .or_else(|| self.routing.catalog.get(&own_name));
        let schema = Arc::new(TableSchema {
            name: routed.clone(),
            relation_id: relation.relation_id,
            columns: relation
                .columns
                .iter()
                .zip(column_types.iter())
                .map(|(c, t)| ColumnSchema {
                    name: c.name.clone(),
                    column_type: ColumnType {
                        oid: c.type_oid,
                        modifier: c.type_modifier,
                        name: t.name.as_ref().map(|n| n.to_string()),
                        definition: self.types.definition(c.type_oid),
                    },
                    nullable: catalog.is_none_or(|info| !info.not_null.contains(&c.name)),
                    part_of_key: c.is_key(),
                    generated: catalog.is_some_and(|info| info.generated.contains(&c.name)),
                })
                .collect(),
            replica_identity: relation.replica_identity,
            primary_key: catalog.map(|i| i.primary_key.clone()).unwrap_or_default(),
        });
        let update = match self.delivered.get(&routed) {
            Some(old) => {
                let differences = layout_differences(old, &schema);
                if differences.is_empty() {
                    RelationUpdate::Unchanged
                } else if self.policy == SchemaChangePolicy::Fail {
                    return Err(Error::config(format!(
                        "schema of table {routed} changed mid-stream: {}; no row under the new schema was delivered. \
                         Restart with the schema change policy `evolve` to deliver it, or re-snapshot the table",
                        differences.join("; ")
                    )));
                } else {
                    RelationUpdate::Changed {
                        old: old.clone(),
                        new: schema.clone(),
                    }
                }
            }
            None => RelationUpdate::Unchanged,
        };
        self.delivered.insert(routed, schema.clone());
        self.relations.insert(
            relation.relation_id,
            CachedRelation {
                schema: Some(schema),
                column_types,
            },
        );
        Ok(update)
    }
}

/// Differences that change how rows must be read (ignoring the relation id, which differs
/// between partitions of one root, and nullability, primary key and generated columns,
/// which the Relation message does not carry).
fn layout_differences(old: &TableSchema, new: &TableSchema) -> Vec<String> {
    let mut comparable = new.clone();
    comparable.relation_id = old.relation_id;
    for (col, old_col) in comparable.columns.iter_mut().zip(old.columns.iter()) {
        col.nullable = old_col.nullable;
        col.generated = old_col.generated;
        col.column_type.name = old_col.column_type.name.clone();
    }
    comparable.primary_key = old.primary_key.clone();
    old.differences(&comparable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::pgoutput::{RelationColumn, ReplicaIdentity};

    fn relation(id: u32, columns: &[(&str, u32)]) -> Relation {
        Relation {
            xid: None,
            relation_id: id,
            namespace: "public".into(),
            name: "orders".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, (name, oid))| RelationColumn {
                    flags: u8::from(i == 0),
                    name: (*name).into(),
                    type_oid: *oid,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    fn orders() -> TableName {
        TableName::new("public", "orders")
    }

    #[test]
    fn unconfigured_relations_are_cached_without_schema() {
        let mut cache = RelationCache::new(
            TableRouting::tables([TableName::new("public", "other")]),
            SchemaChangePolicy::Fail,
        );
        cache.register(&relation(1, &[("id", 23)])).unwrap();
        assert!(cache.get(1).unwrap().schema.is_none());
        assert!(cache.get(2).is_none());
    }

    #[test]
    fn added_column_fails_by_default_and_names_it() {
        let mut cache =
            RelationCache::new(TableRouting::tables([orders()]), SchemaChangePolicy::Fail);
        cache.register(&relation(1, &[("id", 23)])).unwrap();
        assert_eq!(
            cache.register(&relation(1, &[("id", 23)])).unwrap(),
            RelationUpdate::Unchanged
        );
        let err = cache
            .register(&relation(1, &[("id", 23), ("note", 25)]))
            .unwrap_err();
        assert!(err.to_string().contains("public.orders"), "{err}");
        assert!(err.to_string().contains("column \"note\" added"), "{err}");
    }

    #[test]
    fn evolve_reports_old_and_new() {
        let mut cache =
            RelationCache::new(TableRouting::tables([orders()]), SchemaChangePolicy::Evolve);
        cache.register(&relation(1, &[("id", 23)])).unwrap();
        match cache.register(&relation(1, &[("id", 20)])).unwrap() {
            RelationUpdate::Changed { old, new } => {
                assert_eq!(old.columns[0].column_type.oid, 23);
                assert_eq!(new.columns[0].column_type.oid, 20);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partitions_route_to_their_root_and_a_new_session_compares_with_delivered() {
        let root = TableName::new("public", "measurements");
        let part = TableName::new("public", "orders");
        let mut cache = RelationCache::new(
            TableRouting::tables([root.clone()]).with_partition(part, root.clone()),
            SchemaChangePolicy::Fail,
        );
        cache.register(&relation(7, &[("id", 23)])).unwrap();
        assert_eq!(cache.get(7).unwrap().schema.as_ref().unwrap().name, root);
        cache.reset_session();
        assert!(cache.register(&relation(8, &[("id", 25)])).is_err());
    }
}
