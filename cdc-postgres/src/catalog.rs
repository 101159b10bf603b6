//! Catalog facts the source needs beyond what pgoutput sends: each configured table's
//! columns (for the snapshot's COPY and its schema), nullability, primary key, size
//! estimate, partitions, and the definitions of non-built-in column types.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cdc_core::{
    ColumnSchema, ColumnType, Error, ReplicaIdentity, TableName, TableSchema, Text, TypeOid,
};
use tokio_postgres::Client;

use crate::conn::error::{Activity, from_tokio_postgres};
use cdc_pgoutput::backfill::key_order::KeyCollation;
use cdc_pgoutput::changes::TableCatalogInfo;
use cdc_pgoutput::types::{ScalarKind, TypeDef, TypeInfo, TypeRegistry};

/// One configured table as the catalog describes it.
#[derive(Clone, Debug)]
pub struct CatalogTable {
    /// The table's schema as the snapshot delivers it.
    pub schema: Arc<TableSchema>,
    /// Resolved column types, in column order.
    pub column_types: Vec<TypeInfo>,
    /// `reltuples` estimate (−1 or 0 when never analyzed).
    pub estimated_rows: i64,
    /// `relpages`: how many 8 kB pages the heap has (for splitting the copy).
    pub pages: i64,
    /// For a partitioned table: its leaf partitions (copied instead of the parent).
    pub partitions: Vec<TableName>,
    /// The collation the primary key index orders each key column by, in key order, with
    /// the database's default collation resolved to its provider and locale.
    pub key_collations: Vec<KeyCollationInfo>,
    /// Each key column's own collation as SQL names it (`"de_DE"`, `pg_catalog."default"`),
    /// in key order; `None` for a type without one. The server compares keys with it when
    /// pgcdc cannot reproduce their order (see `snapshot::chunk::compare_keys`).
    pub key_collation_names: Vec<Option<String>>,
}

/// A key column's collation as the catalog describes it (owned; see
/// `cdc_pgoutput::backfill::key_order::KeyCollation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyCollationInfo {
    /// The type has no collation.
    NotCollatable,
    /// A libc collation with this `LC_COLLATE`.
    Libc(String),
    /// An ICU collation with this locale.
    Icu(String),
    /// A builtin-provider collation (PostgreSQL 17+) with this locale.
    Builtin(String),
}

impl KeyCollationInfo {
    /// The borrowed form the key order takes.
    pub fn as_key_collation(&self) -> KeyCollation<'_> {
        match self {
            KeyCollationInfo::NotCollatable => KeyCollation::NotCollatable,
            KeyCollationInfo::Libc(collate) => KeyCollation::Libc { collate },
            KeyCollationInfo::Icu(locale) => KeyCollation::Icu { locale },
            KeyCollationInfo::Builtin(locale) => KeyCollation::Builtin { locale },
        }
    }
}

fn sql_error(e: tokio_postgres::Error) -> Error {
    from_tokio_postgres(e, Activity::Command, "a catalog query failed")
}

/// The server's `shared_buffers` in pages (the unit `relpages` counts in); 0 when it cannot
/// be read, which only makes the consistent snapshot read large tables in one COPY each
/// (see `snapshot::copy::plan`).
pub async fn shared_buffer_pages(client: &Client) -> i64 {
    // `setting` is in blocks of the server's page size for this parameter.
    let row = client
        .query_opt(
            "SELECT setting::int8 FROM pg_settings WHERE name = 'shared_buffers'",
            &[],
        )
        .await;
    match row {
        Ok(Some(row)) => row.try_get::<_, i64>(0).unwrap_or(0),
        Ok(None) => 0,
        Err(e) => {
            tracing::debug!("cannot read shared_buffers: {e}");
            0
        }
    }
}

/// Reads every table in `tables` and registers the non-built-in types of their columns in
/// `types`. A missing table is a Config error.
///
/// A table's columns are those `publication` publishes: its column list (PostgreSQL 15+),
/// stored generated columns when it publishes them (PostgreSQL 18+), otherwise every
/// column but generated ones — the columns pgoutput's Relation message will describe.
pub async fn load_tables(
    client: &Client,
    publication: &str,
    tables: &[TableName],
    types: &mut TypeRegistry,
) -> Result<Vec<CatalogTable>, Error> {
    let mut out = Vec::with_capacity(tables.len());
    for name in tables {
        let row = client
            .query_opt(
                "SELECT c.oid, c.relreplident::text, c.reltuples::int8, c.relpages::int8, c.relkind::text \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2",
                &[&name.schema, &name.name],
            )
            .await
            .map_err(sql_error)?
            .ok_or_else(|| Error::config(format!("table {name} does not exist")))?;
        let oid: u32 = row.try_get(0).map_err(sql_error)?;
        let identity: String = row.try_get(1).map_err(sql_error)?;
        let estimated_rows: i64 = row.try_get(2).map_err(sql_error)?;
        let pages: i64 = row.try_get(3).map_err(sql_error)?;
        let relkind: String = row.try_get(4).map_err(sql_error)?;
        let published = published_columns(client, publication, name).await?;
        let columns = client
            .query(
                "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attnotnull, \
                        COALESCE(i.indisprimary, false) AS in_pk, \
                        format_type(a.atttypid, NULL), a.attgenerated <> '' \
                 FROM pg_attribute a \
                 LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
                                      AND a.attnum = ANY(i.indkey) \
                 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped \
                   AND CASE WHEN $2::text[] IS NULL THEN a.attgenerated = '' \
                            ELSE a.attname::text = ANY($2::text[]) END \
                 ORDER BY a.attnum",
                &[&oid, &published],
            )
            .await
            .map_err(sql_error)?;
        let primary_key: Vec<String> = client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord",
                &[&oid],
            )
            .await
            .map_err(sql_error)?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(sql_error)?;
        let (key_collations, key_collation_names): (Vec<KeyCollationInfo>, Vec<Option<String>>) = client
            .query(
                "SELECT k.coll::int8 = 0, \
                        COALESCE(CASE WHEN co.collprovider = 'd' THEN to_jsonb(d) ->> 'datlocprovider' \
                                      ELSE co.collprovider::text END, 'c'), \
                        CASE WHEN co.collprovider = 'd' THEN d.datcollate::text ELSE co.collcollate::text END, \
                        CASE WHEN co.collprovider = 'd' \
                             THEN COALESCE(to_jsonb(d) ->> 'datlocale', to_jsonb(d) ->> 'daticulocale') \
                             ELSE COALESCE(to_jsonb(co) ->> 'colllocale', to_jsonb(co) ->> 'colliculocale') END, \
                        CASE WHEN a.attcollation = 0 THEN NULL ELSE a.attcollation::regcollation::text END \
                 FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[]) WITH ORDINALITY AS k(attnum, coll, ord) \
                 LEFT JOIN pg_collation co ON co.oid = k.coll \
                 LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 CROSS JOIN (SELECT * FROM pg_database WHERE datname = current_database()) d \
                 WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord",
                &[&oid],
            )
            .await
            .map_err(sql_error)?
            .iter()
            .map(|r| {
                let not_collatable: bool = r.try_get(0)?;
                let provider: String = r.try_get(1)?;
                let collate: Option<String> = r.try_get(2)?;
                let locale: Option<String> = r.try_get(3)?;
                let name: Option<String> = r.try_get(4)?;
                let info = if not_collatable {
                    KeyCollationInfo::NotCollatable
                } else {
                    match provider.as_str() {
                        "i" => KeyCollationInfo::Icu(locale.unwrap_or_default()),
                        "b" => KeyCollationInfo::Builtin(locale.unwrap_or_default()),
                        _ => KeyCollationInfo::Libc(collate.unwrap_or_default()),
                    }
                };
                Ok((info, name))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(sql_error)?
            .into_iter()
            .unzip();
        let identity_columns: HashSet<String> = client
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = $1 AND i.indisreplident",
                &[&oid],
            )
            .await
            .map_err(sql_error)?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(sql_error)?;
        let replica_identity = identity
            .bytes()
            .next()
            .and_then(ReplicaIdentity::from_char)
            .unwrap_or(ReplicaIdentity::Default);
        let mut schema_columns = Vec::with_capacity(columns.len());
        let mut type_oids = Vec::with_capacity(columns.len());
        for c in &columns {
            let col_name: String = c.try_get(0).map_err(sql_error)?;
            let type_oid: u32 = c.try_get(1).map_err(sql_error)?;
            let modifier: i32 = c.try_get(2).map_err(sql_error)?;
            let not_null: bool = c.try_get(3).map_err(sql_error)?;
            let type_name: String = c.try_get(5).map_err(sql_error)?;
            let generated: bool = c.try_get(6).map_err(sql_error)?;
            let part_of_key = match replica_identity {
                ReplicaIdentity::Full => true,
                ReplicaIdentity::Nothing => false,
                ReplicaIdentity::Index => identity_columns.contains(&col_name),
                ReplicaIdentity::Default => primary_key.contains(&col_name),
            };
            type_oids.push(type_oid);
            schema_columns.push(ColumnSchema {
                name: col_name,
                column_type: ColumnType {
                    oid: type_oid,
                    modifier,
                    name: Some(type_name),
                    definition: Default::default(),
                },
                nullable: !not_null,
                part_of_key,
                generated,
            });
        }
        define_types(client, &type_oids, types).await?;
        for column in &mut schema_columns {
            column.column_type.definition = types.definition(column.column_type.oid);
        }
        let partitions = if relkind == "p" {
            client
                .query(
                    "SELECT n.nspname::text, c.relname::text FROM pg_partition_tree($1::oid::regclass) t \
                     JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE t.isleaf ORDER BY 1, 2",
                    &[&oid],
                )
                .await
                .map_err(sql_error)?
                .iter()
                .map(|r| Ok(TableName::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?)))
                .collect::<Result<_, tokio_postgres::Error>>()
                .map_err(sql_error)?
        } else {
            Vec::new()
        };
        let column_types = type_oids.iter().map(|oid| types.resolve(*oid)).collect();
        out.push(CatalogTable {
            schema: Arc::new(TableSchema {
                name: name.clone(),
                relation_id: oid,
                columns: schema_columns,
                replica_identity,
                primary_key,
            }),
            column_types,
            estimated_rows,
            pages,
            partitions,
            key_collations,
            key_collation_names,
        });
    }
    Ok(out)
}

/// The columns `publication` publishes of `table` (`pg_publication_tables.attnames`,
/// PostgreSQL 15+); `None` where the server does not say (before 15, or a table the view
/// lists only through its partitions or root), which means every non-generated column.
async fn published_columns(
    client: &Client,
    publication: &str,
    table: &TableName,
) -> Result<Option<Vec<String>>, Error> {
    // Through to_jsonb, so the query is the same on servers whose view lacks the column.
    let row = client
        .query_opt(
            "SELECT ARRAY(SELECT jsonb_array_elements_text(to_jsonb(pt) -> 'attnames')) \
             FROM pg_publication_tables pt \
             WHERE pt.pubname = $1 AND pt.schemaname = $2 AND pt.tablename = $3 \
               AND jsonb_typeof(to_jsonb(pt) -> 'attnames') = 'array'",
            &[&publication, &table.schema, &table.name],
        )
        .await
        .map_err(sql_error)?;
    row.map(|r| r.try_get::<_, Vec<String>>(0))
        .transpose()
        .map_err(sql_error)
}

/// Whether values of `ty` decode from the binary format into their own `Value` variant.
/// Types kept as `Value::Other` (ranges, network, geometric, …) only have an exact text
/// form we can pass on in text format, so they are read as text.
pub fn decodes_from_binary(ty: &TypeInfo) -> bool {
    match ty.array_element() {
        Some(element) => decodes_from_binary(element),
        None => !matches!(ty.scalar_kind(), Some(ScalarKind::Other) | None),
    }
}

impl CatalogTable {
    /// Whether every column decodes from binary (see [`decodes_from_binary`]).
    pub fn binary_safe(&self) -> bool {
        self.column_types.iter().all(decodes_from_binary)
    }
}

/// The facts the relation cache needs for `table`.
pub fn catalog_info(table: &CatalogTable) -> TableCatalogInfo {
    TableCatalogInfo {
        not_null: table
            .schema
            .columns
            .iter()
            .filter(|c| !c.nullable)
            .map(|c| c.name.clone())
            .collect(),
        primary_key: table.schema.primary_key.clone(),
        generated: table
            .schema
            .columns
            .iter()
            .filter(|c| c.generated)
            .map(|c| c.name.clone())
            .collect(),
    }
}

/// Registers the definitions of the non-built-in types among `oids` (enums, domains,
/// arrays of them), following domain bases and array elements.
async fn define_types(
    client: &Client,
    oids: &[TypeOid],
    types: &mut TypeRegistry,
) -> Result<(), Error> {
    let mut pending: Vec<TypeOid> = oids
        .iter()
        .copied()
        .filter(|oid| cdc_pgoutput::types::oids::builtin_name(*oid).is_none())
        .collect();
    let mut seen: HashMap<TypeOid, ()> = HashMap::new();
    while let Some(oid) = pending.pop() {
        if seen.insert(oid, ()).is_some() || cdc_pgoutput::types::oids::builtin_name(oid).is_some()
        {
            continue;
        }
        let Some(row) = client
            .query_opt(
                "SELECT n.nspname::text || '.' || t.typname::text, t.typtype::text, t.typbasetype, \
                        t.typelem, t.typcategory::text, t.typdelim::text \
                 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = $1",
                &[&oid],
            )
            .await
            .map_err(sql_error)?
        else {
            continue;
        };
        let name: String = row.try_get(0).map_err(sql_error)?;
        let typtype: String = row.try_get(1).map_err(sql_error)?;
        let base: u32 = row.try_get(2).map_err(sql_error)?;
        let elem: u32 = row.try_get(3).map_err(sql_error)?;
        let category: String = row.try_get(4).map_err(sql_error)?;
        let delim: String = row.try_get(5).map_err(sql_error)?;
        let def = match typtype.as_str() {
            "e" => {
                let labels = client
                    .query(
                        "SELECT enumlabel::text FROM pg_enum WHERE enumtypid = $1 \
                         ORDER BY enumsortorder",
                        &[&oid],
                    )
                    .await
                    .map_err(sql_error)?
                    .iter()
                    .map(|row| row.try_get::<_, String>(0))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(sql_error)?;
                types.define_enum_labels(oid, labels);
                TypeDef::Enum
            }
            "d" => {
                pending.push(base);
                TypeDef::Domain { base }
            }
            _ if category == "A" && elem != 0 => {
                pending.push(elem);
                TypeDef::Array {
                    element: elem,
                    delimiter: delim.bytes().next().unwrap_or(b','),
                }
            }
            _ => TypeDef::Other,
        };
        types.define(oid, Some(Text::from(name)), def);
    }
    Ok(())
}
