//! Named call trees (`symcluster.v1.CallTreeNode`, flat, parents first) merged per crash
//! group: a hang job's tree is added to its group's when it completes, and taken out when it
//! moves to another group, hits summed (or subtracted) per path of names.

use std::collections::HashMap;

use symcluster_proto::v1::CallTreeNode;

/// Adds `tree` to `into` (`sign` 1), or takes it out (`sign` -1): nodes are matched by their
/// path of names from the top; a path `into` lacks is appended (parents first still holds).
/// Nodes left with no hits are removed. A node whose `parent` is not an earlier node is
/// skipped with its subtree (a tree from a misbehaving worker changes nothing else).
pub fn merge(into: &mut Vec<CallTreeNode>, tree: &[CallTreeNode], sign: i64) {
    let mut children: HashMap<(i64, String), usize> = into
        .iter()
        .enumerate()
        .map(|(i, n)| ((n.parent, n.name.clone()), i))
        .collect();
    // Where each node of `tree` landed in `into` (None: skipped).
    let mut landed: Vec<Option<usize>> = Vec::with_capacity(tree.len());
    for (index, node) in tree.iter().enumerate() {
        let parent = match node.parent {
            -1 => Some(-1),
            p if p >= 0 && (p as usize) < index => landed[p as usize].map(|i| i as i64),
            _ => None,
        };
        let Some(parent) = parent else {
            landed.push(None);
            continue;
        };
        let at = *children
            .entry((parent, node.name.clone()))
            .or_insert_with(|| {
                into.push(CallTreeNode {
                    name: node.name.clone(),
                    hits: 0,
                    parent,
                });
                into.len() - 1
            });
        into[at].hits = if sign >= 0 {
            into[at].hits.saturating_add(node.hits)
        } else {
            into[at].hits.saturating_sub(node.hits)
        };
        landed.push(Some(at));
    }
    prune(into);
}

/// Removes nodes with no hits (and whatever is below them), renumbering parents.
fn prune(tree: &mut Vec<CallTreeNode>) {
    let mut renumbered: Vec<Option<i64>> = Vec::with_capacity(tree.len());
    let mut kept = Vec::with_capacity(tree.len());
    for node in tree.drain(..) {
        let parent = match node.parent {
            -1 => Some(-1),
            p => renumbered.get(p as usize).copied().flatten(),
        };
        match parent {
            Some(parent) if node.hits > 0 => {
                renumbered.push(Some(kept.len() as i64));
                kept.push(CallTreeNode { parent, ..node });
            }
            _ => renumbered.push(None),
        }
    }
    *tree = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, hits: u64, parent: i64) -> CallTreeNode {
        CallTreeNode {
            name: name.into(),
            hits,
            parent,
        }
    }

    #[test]
    fn trees_sum_per_path_and_come_out_again() {
        let one = vec![node("main", 3, -1), node("run", 3, 0), node("spin", 2, 1)];
        let two = vec![node("main", 4, -1), node("run", 1, 0), node("io", 3, 0)];
        let mut group = Vec::new();
        merge(&mut group, &one, 1);
        merge(&mut group, &two, 1);
        assert_eq!(
            group,
            vec![
                node("main", 7, -1),
                node("run", 4, 0),
                node("spin", 2, 1),
                node("io", 3, 0)
            ]
        );
        merge(&mut group, &one, -1);
        assert_eq!(
            group,
            vec![node("main", 4, -1), node("run", 1, 0), node("io", 3, 0)]
        );
        merge(&mut group, &two, -1);
        assert!(group.is_empty());
        // A parent that is not an earlier node: skipped with its subtree.
        merge(&mut group, &[node("a", 1, 5), node("b", 1, 0)], 1);
        assert!(group.is_empty());
    }
}
