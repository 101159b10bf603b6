//! What the decoders know about a column's type: [`TypeInfo`], resolved from the built-in
//! table or a [`TypeRegistry`] that the caller extends with pgoutput Type messages and
//! catalog knowledge.

use std::collections::HashMap;
use std::sync::Arc;

use cdc_core::{Text, TypeDefinition, TypeOid};

use super::oids::{self, BuiltinKind, ScalarKind};

/// Deepest chain of domains and array elements [`TypeRegistry::resolve`] follows; deeper
/// (or cyclic) definitions resolve to [`ScalarKind::Other`].
const MAX_RESOLVE_DEPTH: usize = 8;

/// How a value of a type is decoded: a scalar, or an array of some element type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeKind {
    /// A non-array type.
    Scalar(ScalarKind),
    /// An array type.
    Array(Arc<ArrayType>),
}

/// The element type of an array type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayType {
    /// The element type, resolved.
    pub element: TypeInfo,
    /// The byte between elements in the text form (`pg_type.typdelim`): `,` for every
    /// built-in type except `box` (`;`).
    pub delimiter: u8,
}

/// A column type resolved for decoding: its OID, qualified name and decoder.
///
/// Resolve once per column (for example when a Relation message arrives) and reuse it for
/// every value of the column; resolving allocates for array types, decoding does not look
/// anything up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// The column's type OID as Postgres reports it (for a domain, the domain's OID).
    pub oid: TypeOid,
    /// The qualified name (`pg_catalog.int4`, `public.mood`) when known; carried into
    /// [`OtherValue::type_name`](cdc_core::OtherValue::type_name) and error messages.
    pub name: Option<Text>,
    /// How values are decoded.
    pub kind: TypeKind,
}

impl TypeInfo {
    /// A built-in type by OID; any OID the built-in table does not list resolves to
    /// [`ScalarKind::Other`] with no name.
    pub fn builtin(oid: TypeOid) -> TypeInfo {
        TypeRegistry::new().resolve(oid)
    }

    /// A type decoded as `kind`, named `name`.
    pub fn scalar(oid: TypeOid, name: Option<Text>, kind: ScalarKind) -> TypeInfo {
        TypeInfo {
            oid,
            name,
            kind: TypeKind::Scalar(kind),
        }
    }

    /// The scalar kind, or `None` for an array type.
    pub fn scalar_kind(&self) -> Option<ScalarKind> {
        match self.kind {
            TypeKind::Scalar(kind) => Some(kind),
            TypeKind::Array(_) => None,
        }
    }

    /// The element type of an array type.
    pub fn array_element(&self) -> Option<&TypeInfo> {
        match &self.kind {
            TypeKind::Array(array) => Some(&array.element),
            TypeKind::Scalar(_) => None,
        }
    }
}

/// What a caller knows about a non-built-in type (from `pg_type`: `typtype`, `typelem`,
/// `typbasetype`, `typdelim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeDef {
    /// An enum (`typtype = 'e'`): its values are labels, text in both formats.
    Enum,
    /// A domain (`typtype = 'd'`): decoded as its base type.
    Domain {
        /// `typbasetype`.
        base: TypeOid,
    },
    /// A true array type (`typsubscript = array_subscript_handler`) over `element`.
    Array {
        /// `typelem`.
        element: TypeOid,
        /// `typdelim` of the element type (`,` for nearly every type).
        delimiter: u8,
    },
    /// Anything else (composite, range, extension base types, …): `Value::Other`.
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct CustomType {
    name: Option<Text>,
    def: TypeDef,
}

/// Built-in types plus what the caller has learned about others.
///
/// Built-in OIDs always resolve to the built-in decoders. Other OIDs resolve by what was
/// [`define`](TypeRegistry::define)d or learned from a pgoutput Type message
/// ([`register_type_message`](TypeRegistry::register_type_message)); an OID nothing is
/// known about resolves to [`ScalarKind::Other`] without a name.
#[derive(Clone, Debug, Default)]
pub struct TypeRegistry {
    custom: HashMap<TypeOid, CustomType>,
    /// Enum labels in sort order, where the catalog gave them.
    enum_labels: HashMap<TypeOid, Vec<String>>,
}

impl TypeRegistry {
    /// A registry that knows the built-in types only.
    pub fn new() -> Self {
        TypeRegistry::default()
    }

    /// Records what the catalog says about a non-built-in type, replacing what was known.
    /// `name` is the qualified name (`public.mood`); `None` keeps a name learned before.
    /// Definitions for built-in OIDs are ignored: those always decode as built-ins.
    pub fn define(&mut self, oid: TypeOid, name: Option<Text>, def: TypeDef) {
        if oids::builtin(oid).is_some() {
            return;
        }
        let name = name.or_else(|| self.custom.get(&oid).and_then(|c| c.name.clone()));
        self.custom.insert(oid, CustomType { name, def });
    }

    /// Learns from a pgoutput Type message (`Y`: OID, namespace, type name).
    ///
    /// pgoutput sends the message for every column type outside the built-in range, but
    /// names the *base* type of a domain: a domain over `int4` arrives as
    /// `(domain oid, pg_catalog, int4)`. So a `pg_catalog` name of a built-in type makes
    /// the OID a domain over that built-in (decoded like it), and the name of another type
    /// already known here makes it a domain over that one. Otherwise the OID gets the name
    /// and keeps its definition (an enum defined from the catalog stays an enum), or
    /// becomes [`TypeDef::Other`] when nothing was known.
    pub fn register_type_message(&mut self, oid: TypeOid, namespace: &str, name: &str) {
        if oids::builtin(oid).is_some() {
            return;
        }
        let known = self.custom.get(&oid);
        if let Some(CustomType {
            name: Some(_),
            def: TypeDef::Domain { .. },
        }) = known
        {
            // The catalog already told us the domain's own name and base; the message
            // only repeats the base's name.
            return;
        }
        let qualified = Text::from(format!("{namespace}.{name}"));
        let base = if namespace == "pg_catalog" {
            oids::builtin_by_name(name)
        } else {
            self.custom
                .iter()
                .find(|(other, c)| **other != oid && c.name.as_ref() == Some(&qualified))
                .map(|(other, _)| *other)
        };
        let def = match (base, known) {
            (Some(base), _) => TypeDef::Domain { base },
            (None, Some(known)) => known.def,
            (None, None) => TypeDef::Other,
        };
        self.custom.insert(
            oid,
            CustomType {
                name: Some(qualified),
                def,
            },
        );
    }

    /// Records an enum's labels in sort order (`pg_enum`), for sinks whose schemas list
    /// them.
    pub fn define_enum_labels(&mut self, oid: TypeOid, labels: Vec<String>) {
        self.enum_labels.insert(oid, labels);
    }

    /// What is known of `oid` beyond decoding: a domain's base type (followed through
    /// domains over domains), an enum's labels (when defined), else `Plain`.
    pub fn definition(&self, oid: TypeOid) -> TypeDefinition {
        let mut base = None;
        let mut current = oid;
        for _ in 0..=MAX_RESOLVE_DEPTH {
            match self.custom.get(&current).map(|c| c.def) {
                Some(TypeDef::Domain { base: next }) => {
                    base = Some(next);
                    current = next;
                }
                _ => break,
            }
        }
        if let Some(base) = base {
            return TypeDefinition::Domain { base };
        }
        match (self.custom.get(&oid), self.enum_labels.get(&oid)) {
            (
                Some(CustomType {
                    def: TypeDef::Enum, ..
                }),
                Some(labels),
            ) => TypeDefinition::Enum {
                labels: labels.clone(),
            },
            _ => TypeDefinition::Plain,
        }
    }

    /// The qualified name known for `oid`.
    pub fn name(&self, oid: TypeOid) -> Option<Text> {
        match oids::builtin(oid) {
            Some(b) => Some(Text::from_static(b.name)),
            None => self.custom.get(&oid).and_then(|c| c.name.clone()),
        }
    }

    /// Resolves `oid` into a [`TypeInfo`] for decoding.
    pub fn resolve(&self, oid: TypeOid) -> TypeInfo {
        self.resolve_at(oid, 0)
    }

    fn resolve_at(&self, oid: TypeOid, depth: usize) -> TypeInfo {
        if depth > MAX_RESOLVE_DEPTH {
            return TypeInfo::scalar(oid, self.name(oid), ScalarKind::Other);
        }
        if let Some(b) = oids::builtin(oid) {
            let name = Some(Text::from_static(b.name));
            return match b.kind {
                BuiltinKind::Scalar(kind) => TypeInfo::scalar(oid, name, kind),
                BuiltinKind::Array { element, delimiter } => {
                    self.array(oid, name, element, delimiter, depth)
                }
            };
        }
        let Some(custom) = self.custom.get(&oid) else {
            return TypeInfo::scalar(oid, None, ScalarKind::Other);
        };
        let name = custom.name.clone();
        match custom.def {
            TypeDef::Enum => TypeInfo::scalar(oid, name, ScalarKind::Enum),
            TypeDef::Other => TypeInfo::scalar(oid, name, ScalarKind::Other),
            TypeDef::Array { element, delimiter } => {
                self.array(oid, name, element, delimiter, depth)
            }
            TypeDef::Domain { base } => {
                // The domain keeps its own OID (what the relation and an array header
                // name) and decodes like its base type.
                let base = self.resolve_at(base, depth + 1);
                TypeInfo {
                    oid,
                    name: name.or(base.name),
                    kind: base.kind,
                }
            }
        }
    }

    fn array(
        &self,
        oid: TypeOid,
        name: Option<Text>,
        element: TypeOid,
        delimiter: u8,
        depth: usize,
    ) -> TypeInfo {
        let element = self.resolve_at(element, depth + 1);
        TypeInfo {
            oid,
            name,
            kind: TypeKind::Array(Arc::new(ArrayType { element, delimiter })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::oids;

    #[test]
    fn builtins_resolve_with_names_and_elements() {
        let ty = TypeInfo::builtin(oids::INT4_ARRAY);
        assert_eq!(ty.name.as_deref(), Some("pg_catalog._int4"));
        let element = ty.array_element().unwrap();
        assert_eq!(element.oid, oids::INT4);
        assert_eq!(element.scalar_kind(), Some(ScalarKind::Int4));
        let unknown = TypeInfo::builtin(99_999);
        assert_eq!(unknown.scalar_kind(), Some(ScalarKind::Other));
        assert_eq!(unknown.name, None);
    }

    #[test]
    fn type_message_for_domain_over_builtin_decodes_as_the_builtin() {
        let mut registry = TypeRegistry::new();
        registry.register_type_message(16_390, "pg_catalog", "int4");
        let ty = registry.resolve(16_390);
        assert_eq!(ty.oid, 16_390);
        assert_eq!(ty.scalar_kind(), Some(ScalarKind::Int4));
        assert_eq!(ty.name.as_deref(), Some("pg_catalog.int4"));
    }

    #[test]
    fn type_message_names_an_enum_defined_from_the_catalog() {
        let mut registry = TypeRegistry::new();
        registry.define(16_400, None, TypeDef::Enum);
        registry.register_type_message(16_400, "public", "mood");
        let ty = registry.resolve(16_400);
        assert_eq!(ty.scalar_kind(), Some(ScalarKind::Enum));
        assert_eq!(ty.name.as_deref(), Some("public.mood"));
        // A domain over the enum arrives under the enum's name.
        registry.register_type_message(16_410, "public", "mood");
        assert_eq!(
            registry.resolve(16_410).scalar_kind(),
            Some(ScalarKind::Enum)
        );
    }

    #[test]
    fn unknown_type_message_is_other_with_name() {
        let mut registry = TypeRegistry::new();
        registry.register_type_message(16_500, "public", "hstore");
        let ty = registry.resolve(16_500);
        assert_eq!(ty.scalar_kind(), Some(ScalarKind::Other));
        assert_eq!(ty.name.as_deref(), Some("public.hstore"));
    }

    #[test]
    fn user_array_resolves_its_element_and_cycles_end() {
        let mut registry = TypeRegistry::new();
        registry.define(16_400, Some(Text::from("public.mood")), TypeDef::Enum);
        registry.define(
            16_401,
            Some(Text::from("public._mood")),
            TypeDef::Array {
                element: 16_400,
                delimiter: b',',
            },
        );
        let ty = registry.resolve(16_401);
        assert_eq!(
            ty.array_element().unwrap().scalar_kind(),
            Some(ScalarKind::Enum)
        );
        registry.define(16_600, None, TypeDef::Domain { base: 16_601 });
        registry.define(16_601, None, TypeDef::Domain { base: 16_600 });
        assert_eq!(
            registry.resolve(16_600).scalar_kind(),
            Some(ScalarKind::Other)
        );
    }

    #[test]
    fn builtins_cannot_be_redefined() {
        let mut registry = TypeRegistry::new();
        registry.define(oids::INT4, None, TypeDef::Enum);
        registry.register_type_message(oids::TEXT, "public", "x");
        assert_eq!(
            registry.resolve(oids::INT4).scalar_kind(),
            Some(ScalarKind::Int4)
        );
        assert_eq!(
            registry.resolve(oids::TEXT).name.as_deref(),
            Some("pg_catalog.text")
        );
    }
}
