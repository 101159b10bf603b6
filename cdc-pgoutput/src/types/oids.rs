//! OIDs of Postgres's built-in types (`pg_type.dat`; fixed across versions), the kinds of
//! decoding ([`ScalarKind`]), and the table that says how each built-in type is decoded.

use cdc_core::TypeOid;

/// `bool`
pub const BOOL: TypeOid = 16;
/// `bytea`
pub const BYTEA: TypeOid = 17;
/// `char`
pub const CHAR: TypeOid = 18;
/// `name`
pub const NAME: TypeOid = 19;
/// `int8`
pub const INT8: TypeOid = 20;
/// `int2`
pub const INT2: TypeOid = 21;
/// `int2vector`
pub const INT2VECTOR: TypeOid = 22;
/// `int4`
pub const INT4: TypeOid = 23;
/// `regproc`
pub const REGPROC: TypeOid = 24;
/// `text`
pub const TEXT: TypeOid = 25;
/// `oid`
pub const OID: TypeOid = 26;
/// `tid`
pub const TID: TypeOid = 27;
/// `xid`
pub const XID: TypeOid = 28;
/// `cid`
pub const CID: TypeOid = 29;
/// `oidvector`
pub const OIDVECTOR: TypeOid = 30;
/// `json`
pub const JSON: TypeOid = 114;
/// `xml`
pub const XML: TypeOid = 142;
/// `xml[]`
pub const XML_ARRAY: TypeOid = 143;
/// `pg_node_tree`
pub const PG_NODE_TREE: TypeOid = 194;
/// `json[]`
pub const JSON_ARRAY: TypeOid = 199;
/// `xid8[]`
pub const XID8_ARRAY: TypeOid = 271;
/// `point`
pub const POINT: TypeOid = 600;
/// `lseg`
pub const LSEG: TypeOid = 601;
/// `path`
pub const PATH: TypeOid = 602;
/// `box`
pub const BOX: TypeOid = 603;
/// `polygon`
pub const POLYGON: TypeOid = 604;
/// `line`
pub const LINE: TypeOid = 628;
/// `line[]`
pub const LINE_ARRAY: TypeOid = 629;
/// `cidr`
pub const CIDR: TypeOid = 650;
/// `cidr[]`
pub const CIDR_ARRAY: TypeOid = 651;
/// `float4`
pub const FLOAT4: TypeOid = 700;
/// `float8`
pub const FLOAT8: TypeOid = 701;
/// `unknown`
pub const UNKNOWN: TypeOid = 705;
/// `circle`
pub const CIRCLE: TypeOid = 718;
/// `circle[]`
pub const CIRCLE_ARRAY: TypeOid = 719;
/// `macaddr8`
pub const MACADDR8: TypeOid = 774;
/// `macaddr8[]`
pub const MACADDR8_ARRAY: TypeOid = 775;
/// `money`
pub const MONEY: TypeOid = 790;
/// `money[]`
pub const MONEY_ARRAY: TypeOid = 791;
/// `macaddr`
pub const MACADDR: TypeOid = 829;
/// `inet`
pub const INET: TypeOid = 869;
/// `bool[]`
pub const BOOL_ARRAY: TypeOid = 1000;
/// `bytea[]`
pub const BYTEA_ARRAY: TypeOid = 1001;
/// `char[]`
pub const CHAR_ARRAY: TypeOid = 1002;
/// `name[]`
pub const NAME_ARRAY: TypeOid = 1003;
/// `int2[]`
pub const INT2_ARRAY: TypeOid = 1005;
/// `int2vector[]`
pub const INT2VECTOR_ARRAY: TypeOid = 1006;
/// `int4[]`
pub const INT4_ARRAY: TypeOid = 1007;
/// `regproc[]`
pub const REGPROC_ARRAY: TypeOid = 1008;
/// `text[]`
pub const TEXT_ARRAY: TypeOid = 1009;
/// `tid[]`
pub const TID_ARRAY: TypeOid = 1010;
/// `xid[]`
pub const XID_ARRAY: TypeOid = 1011;
/// `cid[]`
pub const CID_ARRAY: TypeOid = 1012;
/// `oidvector[]`
pub const OIDVECTOR_ARRAY: TypeOid = 1013;
/// `bpchar[]`
pub const BPCHAR_ARRAY: TypeOid = 1014;
/// `varchar[]`
pub const VARCHAR_ARRAY: TypeOid = 1015;
/// `int8[]`
pub const INT8_ARRAY: TypeOid = 1016;
/// `point[]`
pub const POINT_ARRAY: TypeOid = 1017;
/// `lseg[]`
pub const LSEG_ARRAY: TypeOid = 1018;
/// `path[]`
pub const PATH_ARRAY: TypeOid = 1019;
/// `box[]`
pub const BOX_ARRAY: TypeOid = 1020;
/// `float4[]`
pub const FLOAT4_ARRAY: TypeOid = 1021;
/// `float8[]`
pub const FLOAT8_ARRAY: TypeOid = 1022;
/// `polygon[]`
pub const POLYGON_ARRAY: TypeOid = 1027;
/// `oid[]`
pub const OID_ARRAY: TypeOid = 1028;
/// `aclitem`
pub const ACLITEM: TypeOid = 1033;
/// `aclitem[]`
pub const ACLITEM_ARRAY: TypeOid = 1034;
/// `macaddr[]`
pub const MACADDR_ARRAY: TypeOid = 1040;
/// `inet[]`
pub const INET_ARRAY: TypeOid = 1041;
/// `bpchar`
pub const BPCHAR: TypeOid = 1042;
/// `varchar`
pub const VARCHAR: TypeOid = 1043;
/// `date`
pub const DATE: TypeOid = 1082;
/// `time`
pub const TIME: TypeOid = 1083;
/// `timestamp`
pub const TIMESTAMP: TypeOid = 1114;
/// `timestamp[]`
pub const TIMESTAMP_ARRAY: TypeOid = 1115;
/// `date[]`
pub const DATE_ARRAY: TypeOid = 1182;
/// `time[]`
pub const TIME_ARRAY: TypeOid = 1183;
/// `timestamptz`
pub const TIMESTAMPTZ: TypeOid = 1184;
/// `timestamptz[]`
pub const TIMESTAMPTZ_ARRAY: TypeOid = 1185;
/// `interval`
pub const INTERVAL: TypeOid = 1186;
/// `interval[]`
pub const INTERVAL_ARRAY: TypeOid = 1187;
/// `numeric[]`
pub const NUMERIC_ARRAY: TypeOid = 1231;
/// `cstring[]`
pub const CSTRING_ARRAY: TypeOid = 1263;
/// `timetz`
pub const TIMETZ: TypeOid = 1266;
/// `timetz[]`
pub const TIMETZ_ARRAY: TypeOid = 1270;
/// `bit`
pub const BIT: TypeOid = 1560;
/// `bit[]`
pub const BIT_ARRAY: TypeOid = 1561;
/// `varbit`
pub const VARBIT: TypeOid = 1562;
/// `varbit[]`
pub const VARBIT_ARRAY: TypeOid = 1563;
/// `numeric`
pub const NUMERIC: TypeOid = 1700;
/// `refcursor`
pub const REFCURSOR: TypeOid = 1790;
/// `refcursor[]`
pub const REFCURSOR_ARRAY: TypeOid = 2201;
/// `regprocedure`
pub const REGPROCEDURE: TypeOid = 2202;
/// `regoper`
pub const REGOPER: TypeOid = 2203;
/// `regoperator`
pub const REGOPERATOR: TypeOid = 2204;
/// `regclass`
pub const REGCLASS: TypeOid = 2205;
/// `regtype`
pub const REGTYPE: TypeOid = 2206;
/// `regprocedure[]`
pub const REGPROCEDURE_ARRAY: TypeOid = 2207;
/// `regoper[]`
pub const REGOPER_ARRAY: TypeOid = 2208;
/// `regoperator[]`
pub const REGOPERATOR_ARRAY: TypeOid = 2209;
/// `regclass[]`
pub const REGCLASS_ARRAY: TypeOid = 2210;
/// `regtype[]`
pub const REGTYPE_ARRAY: TypeOid = 2211;
/// `record`
pub const RECORD: TypeOid = 2249;
/// `cstring`
pub const CSTRING: TypeOid = 2275;
/// `record[]`
pub const RECORD_ARRAY: TypeOid = 2287;
/// `txid_snapshot[]`
pub const TXID_SNAPSHOT_ARRAY: TypeOid = 2949;
/// `uuid`
pub const UUID: TypeOid = 2950;
/// `uuid[]`
pub const UUID_ARRAY: TypeOid = 2951;
/// `txid_snapshot`
pub const TXID_SNAPSHOT: TypeOid = 2970;
/// `pg_lsn`
pub const PG_LSN: TypeOid = 3220;
/// `pg_lsn[]`
pub const PG_LSN_ARRAY: TypeOid = 3221;
/// `pg_ndistinct`
pub const PG_NDISTINCT: TypeOid = 3361;
/// `pg_dependencies`
pub const PG_DEPENDENCIES: TypeOid = 3402;
/// `tsvector`
pub const TSVECTOR: TypeOid = 3614;
/// `tsquery`
pub const TSQUERY: TypeOid = 3615;
/// `gtsvector`
pub const GTSVECTOR: TypeOid = 3642;
/// `tsvector[]`
pub const TSVECTOR_ARRAY: TypeOid = 3643;
/// `gtsvector[]`
pub const GTSVECTOR_ARRAY: TypeOid = 3644;
/// `tsquery[]`
pub const TSQUERY_ARRAY: TypeOid = 3645;
/// `regconfig`
pub const REGCONFIG: TypeOid = 3734;
/// `regconfig[]`
pub const REGCONFIG_ARRAY: TypeOid = 3735;
/// `regdictionary`
pub const REGDICTIONARY: TypeOid = 3769;
/// `regdictionary[]`
pub const REGDICTIONARY_ARRAY: TypeOid = 3770;
/// `jsonb`
pub const JSONB: TypeOid = 3802;
/// `jsonb[]`
pub const JSONB_ARRAY: TypeOid = 3807;
/// `int4range`
pub const INT4RANGE: TypeOid = 3904;
/// `int4range[]`
pub const INT4RANGE_ARRAY: TypeOid = 3905;
/// `numrange`
pub const NUMRANGE: TypeOid = 3906;
/// `numrange[]`
pub const NUMRANGE_ARRAY: TypeOid = 3907;
/// `tsrange`
pub const TSRANGE: TypeOid = 3908;
/// `tsrange[]`
pub const TSRANGE_ARRAY: TypeOid = 3909;
/// `tstzrange`
pub const TSTZRANGE: TypeOid = 3910;
/// `tstzrange[]`
pub const TSTZRANGE_ARRAY: TypeOid = 3911;
/// `daterange`
pub const DATERANGE: TypeOid = 3912;
/// `daterange[]`
pub const DATERANGE_ARRAY: TypeOid = 3913;
/// `int8range`
pub const INT8RANGE: TypeOid = 3926;
/// `int8range[]`
pub const INT8RANGE_ARRAY: TypeOid = 3927;
/// `jsonpath`
pub const JSONPATH: TypeOid = 4072;
/// `jsonpath[]`
pub const JSONPATH_ARRAY: TypeOid = 4073;
/// `regnamespace`
pub const REGNAMESPACE: TypeOid = 4089;
/// `regnamespace[]`
pub const REGNAMESPACE_ARRAY: TypeOid = 4090;
/// `regrole`
pub const REGROLE: TypeOid = 4096;
/// `regrole[]`
pub const REGROLE_ARRAY: TypeOid = 4097;
/// `regcollation`
pub const REGCOLLATION: TypeOid = 4191;
/// `regcollation[]`
pub const REGCOLLATION_ARRAY: TypeOid = 4192;
/// `int4multirange`
pub const INT4MULTIRANGE: TypeOid = 4451;
/// `nummultirange`
pub const NUMMULTIRANGE: TypeOid = 4532;
/// `tsmultirange`
pub const TSMULTIRANGE: TypeOid = 4533;
/// `tstzmultirange`
pub const TSTZMULTIRANGE: TypeOid = 4534;
/// `datemultirange`
pub const DATEMULTIRANGE: TypeOid = 4535;
/// `int8multirange`
pub const INT8MULTIRANGE: TypeOid = 4536;
/// `pg_mcv_list`
pub const PG_MCV_LIST: TypeOid = 5017;
/// `pg_snapshot`
pub const PG_SNAPSHOT: TypeOid = 5038;
/// `pg_snapshot[]`
pub const PG_SNAPSHOT_ARRAY: TypeOid = 5039;
/// `xid8`
pub const XID8: TypeOid = 5069;
/// `int4multirange[]`
pub const INT4MULTIRANGE_ARRAY: TypeOid = 6150;
/// `nummultirange[]`
pub const NUMMULTIRANGE_ARRAY: TypeOid = 6151;
/// `tsmultirange[]`
pub const TSMULTIRANGE_ARRAY: TypeOid = 6152;
/// `tstzmultirange[]`
pub const TSTZMULTIRANGE_ARRAY: TypeOid = 6153;
/// `datemultirange[]`
pub const DATEMULTIRANGE_ARRAY: TypeOid = 6155;
/// `int8multirange[]`
pub const INT8MULTIRANGE_ARRAY: TypeOid = 6157;

/// How a non-array value is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScalarKind {
    /// `bool` → [`Value::Bool`](cdc_core::Value::Bool).
    Bool,
    /// `int2` → `Value::Int2`.
    Int2,
    /// `int4` → `Value::Int4`.
    Int4,
    /// `int8` → `Value::Int8`.
    Int8,
    /// `oid`, `xid`, `cid`: a u32 in both formats → `Value::Oid`.
    Oid,
    /// `regclass`, `regtype`, `regproc`, …: a u32 in binary (→ `Value::Oid`) but the
    /// object's *name* in text (→ `Value::Other` with that text).
    RegOid,
    /// `float4` → `Value::Float4`.
    Float4,
    /// `float8` → `Value::Float8`.
    Float8,
    /// `numeric` → `Value::Numeric`.
    Numeric,
    /// `text`, `varchar`, `bpchar`, `name` → `Value::Text`.
    Text,
    /// `"char"` (one byte) → `Value::Text`; a byte with the high bit set becomes `\ooo`
    /// as Postgres 15+ prints it.
    Char,
    /// `bytea` → `Value::Bytea`.
    Bytea,
    /// `date` → `Value::Date`.
    Date,
    /// `time` → `Value::Time`.
    Time,
    /// `timetz` → `Value::TimeTz`.
    TimeTz,
    /// `timestamp` → `Value::Timestamp`.
    Timestamp,
    /// `timestamptz` → `Value::TimestampTz`.
    TimestampTz,
    /// `interval` → `Value::Interval`.
    Interval,
    /// `uuid` → `Value::Uuid`.
    Uuid,
    /// `json` → `Value::Json`.
    Json,
    /// `jsonb` → `Value::Jsonb`.
    Jsonb,
    /// An enum: its label in both formats → `Value::Other` with a text representation.
    Enum,
    /// Any other type → `Value::Other` (text or binary representation, as received).
    Other,
}

/// How a built-in type decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuiltinKind {
    /// A scalar type.
    Scalar(ScalarKind),
    /// An array type over `element`, whose text form separates elements by `delimiter`.
    Array { element: TypeOid, delimiter: u8 },
}

/// One row of [`BUILTINS`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Builtin {
    pub oid: TypeOid,
    /// Qualified name, as `pg_catalog.<typname>`.
    pub name: &'static str,
    pub kind: BuiltinKind,
}

/// The built-in type with this OID, if the table lists it.
pub(crate) fn builtin(oid: TypeOid) -> Option<&'static Builtin> {
    BUILTINS
        .binary_search_by_key(&oid, |b| b.oid)
        .ok()
        .and_then(|i| BUILTINS.get(i))
}

/// The OID of the built-in type named `pg_catalog.<typname>`.
pub(crate) fn builtin_by_name(typname: &str) -> Option<TypeOid> {
    BUILTINS
        .iter()
        .find(|b| b.name.strip_prefix("pg_catalog.") == Some(typname))
        .map(|b| b.oid)
}

/// The element type of a built-in array type.
pub fn array_element(oid: TypeOid) -> Option<TypeOid> {
    match builtin(oid)?.kind {
        BuiltinKind::Array { element, .. } => Some(element),
        BuiltinKind::Scalar(_) => None,
    }
}

/// The qualified name (`pg_catalog.int4`, `pg_catalog._int4`) of a built-in type.
pub fn builtin_name(oid: TypeOid) -> Option<&'static str> {
    builtin(oid).map(|b| b.name)
}

const fn scalar(oid: TypeOid, name: &'static str, kind: ScalarKind) -> Builtin {
    Builtin {
        oid,
        name,
        kind: BuiltinKind::Scalar(kind),
    }
}

const fn array(oid: TypeOid, name: &'static str, element: TypeOid) -> Builtin {
    array_with_delimiter(oid, name, element, b',')
}

const fn array_with_delimiter(
    oid: TypeOid,
    name: &'static str,
    element: TypeOid,
    delimiter: u8,
) -> Builtin {
    Builtin {
        oid,
        name,
        kind: BuiltinKind::Array { element, delimiter },
    }
}

/// Every built-in type the decoders know, sorted by OID.
pub(crate) static BUILTINS: &[Builtin] = &[
    scalar(BOOL, "pg_catalog.bool", ScalarKind::Bool),
    scalar(BYTEA, "pg_catalog.bytea", ScalarKind::Bytea),
    scalar(CHAR, "pg_catalog.char", ScalarKind::Char),
    scalar(NAME, "pg_catalog.name", ScalarKind::Text),
    scalar(INT8, "pg_catalog.int8", ScalarKind::Int8),
    scalar(INT2, "pg_catalog.int2", ScalarKind::Int2),
    scalar(INT2VECTOR, "pg_catalog.int2vector", ScalarKind::Other),
    scalar(INT4, "pg_catalog.int4", ScalarKind::Int4),
    scalar(REGPROC, "pg_catalog.regproc", ScalarKind::RegOid),
    scalar(TEXT, "pg_catalog.text", ScalarKind::Text),
    scalar(OID, "pg_catalog.oid", ScalarKind::Oid),
    scalar(TID, "pg_catalog.tid", ScalarKind::Other),
    scalar(XID, "pg_catalog.xid", ScalarKind::Oid),
    scalar(CID, "pg_catalog.cid", ScalarKind::Oid),
    scalar(OIDVECTOR, "pg_catalog.oidvector", ScalarKind::Other),
    scalar(JSON, "pg_catalog.json", ScalarKind::Json),
    scalar(XML, "pg_catalog.xml", ScalarKind::Other),
    array(XML_ARRAY, "pg_catalog._xml", XML),
    scalar(PG_NODE_TREE, "pg_catalog.pg_node_tree", ScalarKind::Other),
    array(JSON_ARRAY, "pg_catalog._json", JSON),
    array(XID8_ARRAY, "pg_catalog._xid8", XID8),
    scalar(POINT, "pg_catalog.point", ScalarKind::Other),
    scalar(LSEG, "pg_catalog.lseg", ScalarKind::Other),
    scalar(PATH, "pg_catalog.path", ScalarKind::Other),
    scalar(BOX, "pg_catalog.box", ScalarKind::Other),
    scalar(POLYGON, "pg_catalog.polygon", ScalarKind::Other),
    scalar(LINE, "pg_catalog.line", ScalarKind::Other),
    array(LINE_ARRAY, "pg_catalog._line", LINE),
    scalar(CIDR, "pg_catalog.cidr", ScalarKind::Other),
    array(CIDR_ARRAY, "pg_catalog._cidr", CIDR),
    scalar(FLOAT4, "pg_catalog.float4", ScalarKind::Float4),
    scalar(FLOAT8, "pg_catalog.float8", ScalarKind::Float8),
    scalar(UNKNOWN, "pg_catalog.unknown", ScalarKind::Other),
    scalar(CIRCLE, "pg_catalog.circle", ScalarKind::Other),
    array(CIRCLE_ARRAY, "pg_catalog._circle", CIRCLE),
    scalar(MACADDR8, "pg_catalog.macaddr8", ScalarKind::Other),
    array(MACADDR8_ARRAY, "pg_catalog._macaddr8", MACADDR8),
    scalar(MONEY, "pg_catalog.money", ScalarKind::Other),
    array(MONEY_ARRAY, "pg_catalog._money", MONEY),
    scalar(MACADDR, "pg_catalog.macaddr", ScalarKind::Other),
    scalar(INET, "pg_catalog.inet", ScalarKind::Other),
    array(BOOL_ARRAY, "pg_catalog._bool", BOOL),
    array(BYTEA_ARRAY, "pg_catalog._bytea", BYTEA),
    array(CHAR_ARRAY, "pg_catalog._char", CHAR),
    array(NAME_ARRAY, "pg_catalog._name", NAME),
    array(INT2_ARRAY, "pg_catalog._int2", INT2),
    array(INT2VECTOR_ARRAY, "pg_catalog._int2vector", INT2VECTOR),
    array(INT4_ARRAY, "pg_catalog._int4", INT4),
    array(REGPROC_ARRAY, "pg_catalog._regproc", REGPROC),
    array(TEXT_ARRAY, "pg_catalog._text", TEXT),
    array(TID_ARRAY, "pg_catalog._tid", TID),
    array(XID_ARRAY, "pg_catalog._xid", XID),
    array(CID_ARRAY, "pg_catalog._cid", CID),
    array(OIDVECTOR_ARRAY, "pg_catalog._oidvector", OIDVECTOR),
    array(BPCHAR_ARRAY, "pg_catalog._bpchar", BPCHAR),
    array(VARCHAR_ARRAY, "pg_catalog._varchar", VARCHAR),
    array(INT8_ARRAY, "pg_catalog._int8", INT8),
    array(POINT_ARRAY, "pg_catalog._point", POINT),
    array(LSEG_ARRAY, "pg_catalog._lseg", LSEG),
    array(PATH_ARRAY, "pg_catalog._path", PATH),
    array_with_delimiter(BOX_ARRAY, "pg_catalog._box", BOX, b';'),
    array(FLOAT4_ARRAY, "pg_catalog._float4", FLOAT4),
    array(FLOAT8_ARRAY, "pg_catalog._float8", FLOAT8),
    array(POLYGON_ARRAY, "pg_catalog._polygon", POLYGON),
    array(OID_ARRAY, "pg_catalog._oid", OID),
    scalar(ACLITEM, "pg_catalog.aclitem", ScalarKind::Other),
    array(ACLITEM_ARRAY, "pg_catalog._aclitem", ACLITEM),
    array(MACADDR_ARRAY, "pg_catalog._macaddr", MACADDR),
    array(INET_ARRAY, "pg_catalog._inet", INET),
    scalar(BPCHAR, "pg_catalog.bpchar", ScalarKind::Text),
    scalar(VARCHAR, "pg_catalog.varchar", ScalarKind::Text),
    scalar(DATE, "pg_catalog.date", ScalarKind::Date),
    scalar(TIME, "pg_catalog.time", ScalarKind::Time),
    scalar(TIMESTAMP, "pg_catalog.timestamp", ScalarKind::Timestamp),
    array(TIMESTAMP_ARRAY, "pg_catalog._timestamp", TIMESTAMP),
    array(DATE_ARRAY, "pg_catalog._date", DATE),
    array(TIME_ARRAY, "pg_catalog._time", TIME),
    scalar(
        TIMESTAMPTZ,
        "pg_catalog.timestamptz",
        ScalarKind::TimestampTz,
    ),
    array(TIMESTAMPTZ_ARRAY, "pg_catalog._timestamptz", TIMESTAMPTZ),
    scalar(INTERVAL, "pg_catalog.interval", ScalarKind::Interval),
    array(INTERVAL_ARRAY, "pg_catalog._interval", INTERVAL),
    array(NUMERIC_ARRAY, "pg_catalog._numeric", NUMERIC),
    array(CSTRING_ARRAY, "pg_catalog._cstring", CSTRING),
    scalar(TIMETZ, "pg_catalog.timetz", ScalarKind::TimeTz),
    array(TIMETZ_ARRAY, "pg_catalog._timetz", TIMETZ),
    scalar(BIT, "pg_catalog.bit", ScalarKind::Other),
    array(BIT_ARRAY, "pg_catalog._bit", BIT),
    scalar(VARBIT, "pg_catalog.varbit", ScalarKind::Other),
    array(VARBIT_ARRAY, "pg_catalog._varbit", VARBIT),
    scalar(NUMERIC, "pg_catalog.numeric", ScalarKind::Numeric),
    scalar(REFCURSOR, "pg_catalog.refcursor", ScalarKind::Other),
    array(REFCURSOR_ARRAY, "pg_catalog._refcursor", REFCURSOR),
    scalar(REGPROCEDURE, "pg_catalog.regprocedure", ScalarKind::RegOid),
    scalar(REGOPER, "pg_catalog.regoper", ScalarKind::RegOid),
    scalar(REGOPERATOR, "pg_catalog.regoperator", ScalarKind::RegOid),
    scalar(REGCLASS, "pg_catalog.regclass", ScalarKind::RegOid),
    scalar(REGTYPE, "pg_catalog.regtype", ScalarKind::RegOid),
    array(REGPROCEDURE_ARRAY, "pg_catalog._regprocedure", REGPROCEDURE),
    array(REGOPER_ARRAY, "pg_catalog._regoper", REGOPER),
    array(REGOPERATOR_ARRAY, "pg_catalog._regoperator", REGOPERATOR),
    array(REGCLASS_ARRAY, "pg_catalog._regclass", REGCLASS),
    array(REGTYPE_ARRAY, "pg_catalog._regtype", REGTYPE),
    scalar(RECORD, "pg_catalog.record", ScalarKind::Other),
    scalar(CSTRING, "pg_catalog.cstring", ScalarKind::Other),
    array(RECORD_ARRAY, "pg_catalog._record", RECORD),
    array(
        TXID_SNAPSHOT_ARRAY,
        "pg_catalog._txid_snapshot",
        TXID_SNAPSHOT,
    ),
    scalar(UUID, "pg_catalog.uuid", ScalarKind::Uuid),
    array(UUID_ARRAY, "pg_catalog._uuid", UUID),
    scalar(TXID_SNAPSHOT, "pg_catalog.txid_snapshot", ScalarKind::Other),
    scalar(PG_LSN, "pg_catalog.pg_lsn", ScalarKind::Other),
    array(PG_LSN_ARRAY, "pg_catalog._pg_lsn", PG_LSN),
    scalar(PG_NDISTINCT, "pg_catalog.pg_ndistinct", ScalarKind::Other),
    scalar(
        PG_DEPENDENCIES,
        "pg_catalog.pg_dependencies",
        ScalarKind::Other,
    ),
    scalar(TSVECTOR, "pg_catalog.tsvector", ScalarKind::Other),
    scalar(TSQUERY, "pg_catalog.tsquery", ScalarKind::Other),
    scalar(GTSVECTOR, "pg_catalog.gtsvector", ScalarKind::Other),
    array(TSVECTOR_ARRAY, "pg_catalog._tsvector", TSVECTOR),
    array(GTSVECTOR_ARRAY, "pg_catalog._gtsvector", GTSVECTOR),
    array(TSQUERY_ARRAY, "pg_catalog._tsquery", TSQUERY),
    scalar(REGCONFIG, "pg_catalog.regconfig", ScalarKind::RegOid),
    array(REGCONFIG_ARRAY, "pg_catalog._regconfig", REGCONFIG),
    scalar(
        REGDICTIONARY,
        "pg_catalog.regdictionary",
        ScalarKind::RegOid,
    ),
    array(
        REGDICTIONARY_ARRAY,
        "pg_catalog._regdictionary",
        REGDICTIONARY,
    ),
    scalar(JSONB, "pg_catalog.jsonb", ScalarKind::Jsonb),
    array(JSONB_ARRAY, "pg_catalog._jsonb", JSONB),
    scalar(INT4RANGE, "pg_catalog.int4range", ScalarKind::Other),
    array(INT4RANGE_ARRAY, "pg_catalog._int4range", INT4RANGE),
    scalar(NUMRANGE, "pg_catalog.numrange", ScalarKind::Other),
    array(NUMRANGE_ARRAY, "pg_catalog._numrange", NUMRANGE),
    scalar(TSRANGE, "pg_catalog.tsrange", ScalarKind::Other),
    array(TSRANGE_ARRAY, "pg_catalog._tsrange", TSRANGE),
    scalar(TSTZRANGE, "pg_catalog.tstzrange", ScalarKind::Other),
    array(TSTZRANGE_ARRAY, "pg_catalog._tstzrange", TSTZRANGE),
    scalar(DATERANGE, "pg_catalog.daterange", ScalarKind::Other),
    array(DATERANGE_ARRAY, "pg_catalog._daterange", DATERANGE),
    scalar(INT8RANGE, "pg_catalog.int8range", ScalarKind::Other),
    array(INT8RANGE_ARRAY, "pg_catalog._int8range", INT8RANGE),
    scalar(JSONPATH, "pg_catalog.jsonpath", ScalarKind::Other),
    array(JSONPATH_ARRAY, "pg_catalog._jsonpath", JSONPATH),
    scalar(REGNAMESPACE, "pg_catalog.regnamespace", ScalarKind::RegOid),
    array(REGNAMESPACE_ARRAY, "pg_catalog._regnamespace", REGNAMESPACE),
    scalar(REGROLE, "pg_catalog.regrole", ScalarKind::RegOid),
    array(REGROLE_ARRAY, "pg_catalog._regrole", REGROLE),
    scalar(REGCOLLATION, "pg_catalog.regcollation", ScalarKind::RegOid),
    array(REGCOLLATION_ARRAY, "pg_catalog._regcollation", REGCOLLATION),
    scalar(
        INT4MULTIRANGE,
        "pg_catalog.int4multirange",
        ScalarKind::Other,
    ),
    scalar(NUMMULTIRANGE, "pg_catalog.nummultirange", ScalarKind::Other),
    scalar(TSMULTIRANGE, "pg_catalog.tsmultirange", ScalarKind::Other),
    scalar(
        TSTZMULTIRANGE,
        "pg_catalog.tstzmultirange",
        ScalarKind::Other,
    ),
    scalar(
        DATEMULTIRANGE,
        "pg_catalog.datemultirange",
        ScalarKind::Other,
    ),
    scalar(
        INT8MULTIRANGE,
        "pg_catalog.int8multirange",
        ScalarKind::Other,
    ),
    scalar(PG_MCV_LIST, "pg_catalog.pg_mcv_list", ScalarKind::Other),
    scalar(PG_SNAPSHOT, "pg_catalog.pg_snapshot", ScalarKind::Other),
    array(PG_SNAPSHOT_ARRAY, "pg_catalog._pg_snapshot", PG_SNAPSHOT),
    scalar(XID8, "pg_catalog.xid8", ScalarKind::Other),
    array(
        INT4MULTIRANGE_ARRAY,
        "pg_catalog._int4multirange",
        INT4MULTIRANGE,
    ),
    array(
        NUMMULTIRANGE_ARRAY,
        "pg_catalog._nummultirange",
        NUMMULTIRANGE,
    ),
    array(TSMULTIRANGE_ARRAY, "pg_catalog._tsmultirange", TSMULTIRANGE),
    array(
        TSTZMULTIRANGE_ARRAY,
        "pg_catalog._tstzmultirange",
        TSTZMULTIRANGE,
    ),
    array(
        DATEMULTIRANGE_ARRAY,
        "pg_catalog._datemultirange",
        DATEMULTIRANGE,
    ),
    array(
        INT8MULTIRANGE_ARRAY,
        "pg_catalog._int8multirange",
        INT8MULTIRANGE,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(BUILTINS.windows(2).all(|w| w[0].oid < w[1].oid));
    }

    #[test]
    fn every_array_element_is_listed_and_scalar() {
        for b in BUILTINS {
            if let BuiltinKind::Array { element, .. } = b.kind {
                let e = builtin(element).unwrap();
                assert!(matches!(e.kind, BuiltinKind::Scalar(_)), "{}", b.name);
                assert_eq!(b.name, format!("pg_catalog._{}", &e.name[11..]));
            }
        }
    }

    #[test]
    fn every_scalar_has_its_array_type() {
        for b in BUILTINS {
            if matches!(b.kind, BuiltinKind::Scalar(_))
                && !matches!(
                    b.oid,
                    PG_NODE_TREE | UNKNOWN | PG_NDISTINCT | PG_DEPENDENCIES | PG_MCV_LIST
                )
            {
                assert!(
                    BUILTINS.iter().any(|a| array_element(a.oid) == Some(b.oid)),
                    "{} has no array type",
                    b.name
                );
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(array_element(INT4_ARRAY), Some(INT4));
        assert_eq!(array_element(INT4), None);
        assert_eq!(builtin_name(NUMERIC), Some("pg_catalog.numeric"));
        assert_eq!(builtin_by_name("_text"), Some(TEXT_ARRAY));
        assert_eq!(builtin_by_name("mood"), None);
        assert_eq!(builtin(16_385).map(|b| b.oid), None);
    }
}
