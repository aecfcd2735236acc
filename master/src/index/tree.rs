//! Named call trees (`symcluster.v1.CallTreeNode`, flat, parents first) merged per crash
//! group: a hang job's tree is added to its group's when it completes, and taken out when it
//! moves to another group or is purged, hits summed (or subtracted) per path of names.
//!
//! A group's tree is bounded: past [`MAX_GROUP_TREE_NODES`] nodes the lightest paths are left
//! out and their samples counted in `GroupTree.other_hits` (the "other" of profilers' flame
//! graphs), so hang reports of one fingerprint with random deeper frames (unsymbolicated
//! addresses are names of their own) cannot grow one record, and the time to apply each
//! completion, without bound.

use std::collections::HashMap;

use symcluster_proto::cluster::v1::GroupTree;
use symcluster_proto::v1::CallTreeNode;

/// The most nodes a crash group's merged call tree keeps (the heaviest paths by hits).
pub const MAX_GROUP_TREE_NODES: usize = 2_000;

/// Where a node of the tree being merged landed.
#[derive(Clone, Copy)]
enum Landed {
    /// At this index of the group's nodes.
    At(usize),
    /// Its path is not in the group's tree (taking out a path left out before).
    Absent,
    /// Its `parent` is not an earlier node: skipped with its subtree.
    Invalid,
}

/// Adds `tree` to `into` (`sign` 1), or takes it out (`sign` -1): nodes are matched by their
/// path of names from the top; a path `into` lacks is appended (parents first still holds).
/// Taking out a path `into` lacks (left out before) takes its hits from `other_hits`. Nodes
/// left with no hits are removed, then, when `bounded` (commands of version 5 on: an older
/// entry replays as it applied then, so that every master holds the same tree whenever it was
/// upgraded), the tree is bounded to [`MAX_GROUP_TREE_NODES`] ([`bound`]). A node whose
/// `parent` is not an earlier node is skipped with its subtree (a tree from a misbehaving
/// worker changes nothing else).
///
/// `other_hits` is an approximation: a path left out and later added again is a new node, so
/// taking out a job that added to it before it was left out takes from that node, not from
/// `other_hits`.
pub fn merge(into: &mut GroupTree, tree: &[CallTreeNode], sign: i64, bounded: bool) {
    let nodes = &mut into.nodes;
    let mut children: HashMap<(i64, String), usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ((n.parent, n.name.clone()), i))
        .collect();
    let mut landed: Vec<Landed> = Vec::with_capacity(tree.len());
    for (index, node) in tree.iter().enumerate() {
        let parent = match node.parent {
            -1 => Landed::At(usize::MAX),
            p if p >= 0 && (p as usize) < index => landed[p as usize],
            _ => Landed::Invalid,
        };
        let parent = match parent {
            Landed::At(usize::MAX) => -1,
            Landed::At(at) => at as i64,
            Landed::Absent => {
                landed.push(Landed::Absent);
                continue;
            }
            Landed::Invalid => {
                landed.push(Landed::Invalid);
                continue;
            }
        };
        let key = (parent, node.name.clone());
        if sign < 0 {
            match children.get(&key) {
                Some(&at) => {
                    nodes[at].hits = nodes[at].hits.saturating_sub(node.hits);
                    landed.push(Landed::At(at));
                }
                None => {
                    into.other_hits = into.other_hits.saturating_sub(node.hits);
                    landed.push(Landed::Absent);
                }
            }
            continue;
        }
        let at = *children.entry(key).or_insert_with(|| {
            nodes.push(CallTreeNode {
                name: node.name.clone(),
                hits: 0,
                parent,
            });
            nodes.len() - 1
        });
        nodes[at].hits = nodes[at].hits.saturating_add(node.hits);
        landed.push(Landed::At(at));
    }
    prune(&mut into.nodes);
    if bounded {
        bound(into, MAX_GROUP_TREE_NODES);
    }
}

/// Keeps at most `max` nodes of `tree`: the heaviest by hits (ties: the earlier), each with
/// every node above it; the hits of the top node of each subtree left out go to `other_hits`.
/// A node whose `parent` is not an earlier node is left out (with its hits in `other_hits`).
pub fn bound(tree: &mut GroupTree, max: usize) {
    if tree.nodes.len() <= max {
        return;
    }
    let mut order: Vec<usize> = (0..tree.nodes.len()).collect();
    order.sort_by(|&a, &b| tree.nodes[b].hits.cmp(&tree.nodes[a].hits).then(a.cmp(&b)));
    let mut chosen = vec![false; tree.nodes.len()];
    for &i in order.iter().take(max) {
        chosen[i] = true;
    }
    // Parents come first: a node is kept when chosen and its parent is kept.
    let mut kept = vec![false; tree.nodes.len()];
    for (i, node) in tree.nodes.iter().enumerate() {
        // `None`: not an earlier node.
        let parent_kept = match node.parent {
            -1 => Some(true),
            p if p >= 0 && (p as usize) < i => Some(kept[p as usize]),
            _ => None,
        };
        kept[i] = chosen[i] && parent_kept == Some(true);
        // The top of a subtree left out (its parent kept, or none to speak of).
        if !kept[i] && parent_kept != Some(false) {
            tree.other_hits = tree.other_hits.saturating_add(node.hits);
        }
    }
    let mut renumbered: Vec<i64> = Vec::with_capacity(tree.nodes.len());
    let mut out = Vec::with_capacity(max);
    for (i, node) in tree.nodes.drain(..).enumerate() {
        if kept[i] {
            renumbered.push(out.len() as i64);
            let parent = if node.parent < 0 {
                -1
            } else {
                renumbered[node.parent as usize]
            };
            out.push(CallTreeNode { parent, ..node });
        } else {
            renumbered.push(-1);
        }
    }
    tree.nodes = out;
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
        let mut group = GroupTree::default();
        merge(&mut group, &one, 1, true);
        merge(&mut group, &two, 1, true);
        assert_eq!(
            group.nodes,
            vec![
                node("main", 7, -1),
                node("run", 4, 0),
                node("spin", 2, 1),
                node("io", 3, 0)
            ]
        );
        merge(&mut group, &one, -1, true);
        assert_eq!(
            group.nodes,
            vec![node("main", 4, -1), node("run", 1, 0), node("io", 3, 0)]
        );
        merge(&mut group, &two, -1, true);
        assert!(group.nodes.is_empty());
        // A parent that is not an earlier node: skipped with its subtree.
        merge(&mut group, &[node("a", 1, 5), node("b", 1, 0)], 1, true);
        assert_eq!(group, GroupTree::default());
    }

    #[test]
    fn a_tree_past_the_bound_keeps_its_heaviest_paths_and_counts_the_rest() {
        // main(10) -> hot(6) -> a(4), b(2); main -> cold(3) -> c(3); main -> rare(1)
        let mut tree = GroupTree {
            nodes: vec![
                node("main", 10, -1),
                node("hot", 6, 0),
                node("a", 4, 1),
                node("b", 2, 1),
                node("cold", 3, 0),
                node("c", 3, 4),
                node("rare", 1, 0),
            ],
            other_hits: 0,
        };
        bound(&mut tree, 4);
        // Heaviest four: main 10, hot 6, a 4, then cold 3 (before c 3: earlier). Left out:
        // b (2, under hot), c (3, under cold), rare (1, under main).
        assert_eq!(
            tree.nodes,
            vec![
                node("main", 10, -1),
                node("hot", 6, 0),
                node("a", 4, 1),
                node("cold", 3, 0),
            ]
        );
        assert_eq!(tree.other_hits, 2 + 3 + 1);
        // Taking out a job whose paths were partly left out: what is kept loses its hits, what
        // was left out comes off `other_hits`.
        merge(
            &mut tree,
            &[node("main", 3, -1), node("cold", 3, 0), node("c", 3, 1)],
            -1,
            true,
        );
        assert_eq!(
            tree.nodes,
            vec![node("main", 7, -1), node("hot", 6, 0), node("a", 4, 1)]
        );
        assert_eq!(tree.other_hits, 3);
    }

    #[test]
    fn an_older_entry_is_merged_unbounded_and_a_forward_parent_is_left_out() {
        let chain: Vec<CallTreeNode> = (0..MAX_GROUP_TREE_NODES as i64 + 5)
            .map(|i| node(&format!("f{i}"), 1, i - 1))
            .collect();
        let mut group = GroupTree::default();
        merge(&mut group, &chain, 1, false);
        assert_eq!(group.nodes.len(), MAX_GROUP_TREE_NODES + 5);
        // A stored tree whose node names a later parent: left out, never a panic.
        let mut tree = GroupTree {
            nodes: vec![node("a", 2, -1), node("b", 1, 7), node("c", 1, 0)],
            other_hits: 0,
        };
        bound(&mut tree, 1);
        assert_eq!(tree.nodes, vec![node("a", 2, -1)]);
        assert_eq!(tree.other_hits, 2);
    }

    #[test]
    fn a_child_heavier_than_its_parent_is_not_kept_without_it() {
        // A misbehaving worker's counts: the child outweighs its parent.
        let mut tree = GroupTree {
            nodes: vec![node("a", 1, -1), node("b", 9, 0), node("c", 5, -1)],
            other_hits: 0,
        };
        bound(&mut tree, 2);
        assert_eq!(tree.nodes, vec![node("c", 5, -1)]);
        assert_eq!(tree.other_hits, 1);
    }

    #[test]
    fn random_deep_paths_keep_the_tree_bounded() {
        let mut group = GroupTree::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut total = 0;
        for _ in 0..200 {
            // One shared top, then 30 frames of random addresses.
            let mut tree = vec![node("main", 5, -1), node("hang", 5, 0)];
            for depth in 0..30 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                tree.push(node(&format!("0x{seed:x}"), 5, depth + 1));
            }
            total += 5;
            merge(&mut group, &tree, 1, true);
            assert!(group.nodes.len() <= MAX_GROUP_TREE_NODES);
        }
        assert_eq!(group.nodes[0], node("main", total, -1));
        assert_eq!(group.nodes[1], node("hang", total, 0));
        // Every address has 5 hits: ties keep the earlier nodes, so the first 66 paths stay
        // whole (1,980 nodes) with the first 18 frames of the 67th; the 67th's 19th frame and
        // the 133 later paths (each from its top) are counted as other.
        assert_eq!(group.nodes.len(), MAX_GROUP_TREE_NODES);
        assert_eq!(group.other_hits, 5 * (1 + 133));
    }
}
