//! Merging an applied configuration into an object: maps recursively,
//! lists by their strategy, other values replaced.

use serde_json::{Map, Value};

use super::{Lists, Rule, item_key, strategy};

/// Merges an applied configuration into an object.
pub fn merge_config(target: &mut Value, config: &Value, lists: Lists<'_>) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => merge_map(t, c, lists),
        (t, c) => *t = c.clone(),
    }
}

pub(super) fn merge_map(t: &mut Map<String, Value>, c: &Map<String, Value>, lists: Lists<'_>) {
    for (k, cv) in c {
        let child = lists.field(k);
        match cv {
            Value::Object(cm) => {
                let e = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !e.is_object() {
                    *e = Value::Object(Map::new());
                }
                if let Value::Object(tm) = e {
                    merge_map(tm, cm, child);
                }
            }
            Value::Array(ca) => {
                let mut cur = t
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                match strategy(k, ca, child) {
                    Rule::Atomic => cur = ca.clone(),
                    Rule::Set => {
                        for i in ca {
                            if !cur.contains(i) {
                                cur.push(i.clone());
                            }
                        }
                    }
                    Rule::Keys(keys) => {
                        let item_lists = child.items();
                        for i in ca {
                            let key = item_key(i, &keys);
                            match cur
                                .iter_mut()
                                .find(|x| key.is_some() && item_key(x, &keys) == key)
                            {
                                Some(x) => merge_config(x, i, item_lists),
                                None => cur.push(i.clone()),
                            }
                        }
                    }
                }
                t.insert(k.clone(), Value::Array(cur));
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}
