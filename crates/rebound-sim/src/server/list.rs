//! LIST: selectors, paging through pinned snapshots (continue tokens) and
//! the resourceVersion semantics of the real server.

use std::sync::Arc;

use serde_json::{Value, json};

use super::errors::ApiError;
use super::ops::{ListQuery, Loc, Reply, meta_str};
use super::state::Shared;
use super::store::{ChangeKind, Inner};

impl Shared {
    /// LIST with selectors, paging and resourceVersion semantics.
    pub async fn list(&self, loc: &Loc, q: &ListQuery) -> Result<Reply, ApiError> {
        if let Some(rv) = q.rv.as_deref().filter(|r| !r.is_empty() && *r != "0") {
            let want: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
            let (cur, floor) = {
                let r = self.store.read();
                (r.rv(), r.floor())
            };
            if want > cur
                && !self
                    .store
                    .wait_for_rv(want, std::time::Duration::from_secs(3))
                    .await
            {
                return Err(ApiError::too_large_rv(want, self.store.read().rv()));
            }
            if q.rv_match.as_deref() == Some("Exact") && want != cur {
                if want < floor {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {want} ({floor})"
                    )));
                }
                return self.list_exact(loc, q, want);
            }
        }
        let (rv, items, offset) = if let Some(tok) = q.cont.as_deref().filter(|t| !t.is_empty()) {
            let (id, offset) = parse_token(tok)
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            let (rv, items) = self.store.snapshot(id).ok_or_else(|| {
                ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
            })?;
            (rv, items, offset)
        } else {
            // only the cheap Arc copies under the lock; selectors run outside
            // it so a big list does not hold up writers
            let (rv, candidates) = {
                let r = self.store.read();
                (r.rv(), self.candidates(&r, loc, q))
            };
            let items = candidates
                .into_iter()
                .filter(|o| q.labels.matches(o) && q.fields.matches(o))
                .collect();
            (rv, Arc::new(items), 0)
        };
        Ok(Reply::ok(self.page(loc, q, rv, items, offset)))
    }

    /// The objects a list may return before selectors: one namespace (or
    /// all), or the one named by a `metadata.name=` field selector.
    pub(super) fn candidates(&self, r: &Inner, loc: &Loc, q: &ListQuery) -> Vec<Arc<Value>> {
        let ns = if loc.res.namespaced {
            loc.ns.as_deref()
        } else {
            None
        };
        match (q.fields.pinned_name(), ns) {
            (Some(name), Some(ns)) => r.get(&loc.key, ns, name).into_iter().collect(),
            (Some(name), None) => r
                .iter(&loc.key, None)
                .filter(|((_, n), _)| n == name)
                .map(|(_, o)| o.clone())
                .collect(),
            (None, ns) => r.iter(&loc.key, ns).map(|(_, o)| o.clone()).collect(),
        }
    }

    /// The objects matching a list query.
    pub(super) fn select(&self, r: &Inner, loc: &Loc, q: &ListQuery) -> Vec<Arc<Value>> {
        self.candidates(r, loc, q)
            .into_iter()
            .filter(|o| q.labels.matches(o) && q.fields.matches(o))
            .collect()
    }

    /// A list at an older resourceVersion, rebuilt by undoing later history.
    pub(super) fn list_exact(
        &self,
        loc: &Loc,
        q: &ListQuery,
        want: u64,
    ) -> Result<Reply, ApiError> {
        let r = self.store.read();
        let ns = if loc.res.namespaced {
            loc.ns.clone()
        } else {
            None
        };
        let mut objs: std::collections::BTreeMap<(String, String), Arc<Value>> = r
            .iter(&loc.key, ns.as_deref())
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for c in r.history_since(want).iter().rev() {
            if *c.res != *loc.key || ns.as_deref().is_some_and(|n| n != c.ns) {
                continue;
            }
            let name = meta_str(&c.obj, "name").unwrap_or("").to_string();
            let k = (c.ns.clone(), name);
            match (&c.kind, &c.old) {
                (ChangeKind::Added, _) => {
                    objs.remove(&k);
                }
                (_, Some(old)) => {
                    objs.insert(k, old.clone());
                }
                _ => {}
            }
        }
        let items: Vec<Arc<Value>> = objs
            .into_values()
            .filter(|o| q.labels.matches(o) && q.fields.matches(o))
            .collect();
        Ok(Reply::ok(self.page(loc, q, want, Arc::new(items), 0)))
    }

    pub(super) fn page(
        &self,
        loc: &Loc,
        q: &ListQuery,
        rv: u64,
        items: Arc<Vec<Arc<Value>>>,
        offset: usize,
    ) -> Value {
        let total = items.len();
        let end = if q.limit > 0 {
            (offset + q.limit).min(total)
        } else {
            total
        };
        let page: Vec<Value> = items
            .get(offset.min(total)..end)
            .unwrap_or(&[])
            .iter()
            .map(|o| {
                let mut v = self.view(loc, o);
                if !loc.res.custom
                    && let Some(m) = v.as_object_mut()
                {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                v
            })
            .collect();
        let mut md = json!({"resourceVersion": rv.to_string()});
        if end < total {
            let id = if offset == 0 {
                self.store.pin(rv, items.to_vec())
            } else {
                q.cont
                    .as_deref()
                    .and_then(parse_token)
                    .map(|(id, _)| id)
                    .unwrap_or(0)
            };
            md["continue"] = json!(format!("{rv}.{id}.{end}"));
            // a selected list cannot count what is left (the real server
            // omits the count then)
            if q.labels.is_empty() && q.fields.is_empty() {
                md["remainingItemCount"] = json!(total - end);
            }
        }
        json!({
            "kind": format!("{}List", loc.res.kind),
            "apiVersion": loc.res.api_version(&loc.version),
            "metadata": md,
            "items": page,
        })
    }
}

pub(super) fn parse_token(tok: &str) -> Option<(u64, usize)> {
    let mut it = tok.split('.');
    let _rv: u64 = it.next()?.parse().ok()?;
    let id = it.next()?.parse().ok()?;
    let off = it.next()?.parse().ok()?;
    Some((id, off))
}
