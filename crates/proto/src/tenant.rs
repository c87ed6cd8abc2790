//! Tenant IDs and the tenants a request names.
//!
//! A tenant ID follows the rules of Tempo (and Mimir, Loki and Cortex, which
//! share them): 1 to 150 bytes of ASCII letters, digits and `! - _ . * ' ( )`,
//! but not `.` or `..`. Every one of them is safe as a directory name, which
//! is how the storage engine keeps tenants apart. A request names one tenant,
//! or several separated by `|` to read them together (`X-Scope-OrgID: a|b`);
//! a write names exactly one.

use std::fmt;

/// The header Tempo, Grafana's Tempo data source and the Collector's
/// `headers_setter` use for the tenant (HTTP and gRPC metadata alike; header
/// names are case-insensitive).
pub const DEFAULT_HEADER_NAME: &str = "X-Scope-OrgID";

/// The tenant of data written while tenancy was off: Tempo's name for the
/// one tenant of a single-tenant store.
pub const SINGLE_TENANT: &str = "single-tenant";

/// Longest tenant ID, in bytes.
pub const MAX_LEN: usize = 150;

/// Most tenants one request may read together.
pub const MAX_TENANTS_PER_REQUEST: usize = 100;

/// A valid tenant ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(String);

/// Why a tenant ID or a list of them is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTenant(String);

impl fmt::Display for InvalidTenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidTenant {}

impl InvalidTenant {
    /// A refusal for another `reason` than the ID's own rules (a header
    /// given twice, one that is not text).
    pub fn new(reason: impl Into<String>) -> Self {
        InvalidTenant(reason.into())
    }
}

impl TenantId {
    /// `id` if it is a valid tenant ID.
    pub fn new(id: &str) -> Result<TenantId, InvalidTenant> {
        if id.is_empty() {
            return Err(InvalidTenant("the tenant ID is empty".into()));
        }
        if id.len() > MAX_LEN {
            return Err(InvalidTenant(format!(
                "the tenant ID is {} bytes long; at most {MAX_LEN} are allowed",
                id.len()
            )));
        }
        if id == "." || id == ".." {
            return Err(InvalidTenant(format!("{id:?} is not a valid tenant ID")));
        }
        if let Some(c) = id.chars().find(|&c| !allowed(c)) {
            return Err(InvalidTenant(format!(
                "the tenant ID {:?} holds {c:?}; only letters, digits and ! - _ . * ' ( ) are allowed",
                shown(id)
            )));
        }
        Ok(TenantId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | '_' | '.' | '*' | '\'' | '(' | ')')
}

/// At most 40 characters of `id`, for an error message.
fn shown(id: &str) -> String {
    let mut s: String = id.chars().take(40).collect();
    if s.len() < id.len() {
        s.push('…');
    }
    s
}

/// The tenants a request names: one or more, sorted, each once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenants(Vec<TenantId>);

impl Tenants {
    /// One tenant.
    pub fn one(id: TenantId) -> Tenants {
        Tenants(vec![id])
    }

    /// The tenants of a header's value: IDs separated by `|`.
    pub fn parse(value: &str) -> Result<Tenants, InvalidTenant> {
        let mut ids = value
            .split('|')
            .map(|id| TenantId::new(id.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        ids.sort();
        ids.dedup();
        if ids.len() > MAX_TENANTS_PER_REQUEST {
            return Err(InvalidTenant(format!(
                "{} tenants in one request; at most {MAX_TENANTS_PER_REQUEST} are allowed",
                ids.len()
            )));
        }
        Ok(Tenants(ids))
    }

    pub fn ids(&self) -> &[TenantId] {
        &self.0
    }

    /// The one tenant a write goes to, or why there is not one.
    pub fn single(&self) -> Result<&TenantId, InvalidTenant> {
        match self.0.as_slice() {
            [one] => Ok(one),
            _ => Err(InvalidTenant(format!(
                "a write goes to one tenant; this request names {} ({self})",
                self.0.len()
            ))),
        }
    }
}

impl fmt::Display for Tenants {
    /// As a header holds them: `a|b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(id.as_str())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_follow_tempos_rules() {
        for ok in [
            "a",
            "team-1",
            "A_b.c",
            "x!*'()",
            &"z".repeat(MAX_LEN),
            "...",
        ] {
            assert_eq!(TenantId::new(ok).expect(ok).as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "ünï",
            "a|b",
            "a:b",
            &"z".repeat(MAX_LEN + 1),
        ] {
            let e = TenantId::new(bad).expect_err(bad);
            assert!(!e.to_string().is_empty());
        }
        let e = TenantId::new("a/b").expect_err("a slash").to_string();
        assert!(e.contains("'/'") && e.contains("only letters"), "{e}");
    }

    #[test]
    fn a_header_names_one_or_more_tenants_sorted_each_once() {
        let t = Tenants::parse("b|a|b").expect("parse");
        assert_eq!(t.to_string(), "a|b");
        assert!(t.single().is_err());
        let one = Tenants::parse(" a ").expect("parse");
        assert_eq!(one.single().expect("one").as_str(), "a");
        assert!(Tenants::parse("a||b").is_err());
        assert!(Tenants::parse("a|../b").is_err());
        let many: Vec<String> = (0..=MAX_TENANTS_PER_REQUEST)
            .map(|i| i.to_string())
            .collect();
        assert!(Tenants::parse(&many.join("|")).is_err());
    }
}
