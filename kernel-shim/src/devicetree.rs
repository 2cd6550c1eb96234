//! The flattened device tree (DTB) the firmware hands the kernel on the `virt` boards: its
//! nodes and properties, read in place.
//!
//! The kernel reads a few things from it: the CPUs (`/cpus/cpu@…`: `reg`, `numa-node-id`,
//! `capacity-dmips-mhz`, `phandle`, and on riscv64 `riscv,isa` and `timebase-frequency`),
//! `/cpus/cpu-map`, `/psci`'s `method`, `/chosen`'s `bootargs`, and for a workload program the
//! `/memory` ranges ([`DeviceTree::ram_holds`]). The tree comes from outside
//! the kernel, so it is checked whole when it is opened ([`DeviceTree::new`]: the header's
//! blocks lie inside the blob, every token, name and property lies inside its block, the
//! nodes nest, no node holds two properties or two children of one name) and every later read
//! is bounds-checked too: a malformed tree is refused with a
//! [`DtError`] or reads as absent, never a panic. (The `fdt` crate this replaces panics on
//! several malformed trees.)
//!
//! The format is the Devicetree Specification's (v0.4, chapter 5): a 40-byte big-endian
//! header, a structure block of 4-byte-aligned tokens and a strings block of property names.
//! A bare-metal crate has no host tests, so the runner compiles this file on the host for
//! its own (`qemu-tests/src/kernel_devicetree.rs`): it reads trees built there, and damaged
//! ones at random, without a panic.

/// The header's magic number.
const MAGIC: u32 = 0xd00d_feed;
/// The header's length in bytes (version 17).
pub const HEADER_LEN: usize = 40;
/// The largest tree the kernel reads: QEMU's `virt` trees are well below it, and on aarch64
/// the 2 MiB below the kernel's image are all the tree may take.
pub const MAX_LEN: usize = 2 << 20;
/// Deepest nesting accepted (QEMU's trees nest five deep at most: `/cpus/cpu-map/socket/
/// cluster/core`).
const MAX_DEPTH: usize = 16;
/// Most entries (properties and child nodes) one node may hold: QEMU's largest, `/cpus` of a
/// 512-vCPU machine, holds about 520. The check for names given twice compares a node's
/// entries pairwise, so this bounds its cost on a tree built to make it slow.
pub const MAX_ENTRIES: usize = 1024;

/// Structure-block tokens.
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;

/// Why a device tree is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtError {
    /// No magic number, or a header that does not fit.
    Header,
    /// Its total size is beyond [`MAX_LEN`] or beyond the bytes given.
    Size,
    /// A block (memory reservations, structure, strings) lies outside the tree.
    Blocks,
    /// A token, name or property runs past its block, a name is not UTF-8 text, the nodes
    /// do not nest into one root, or a node holds more than [`MAX_ENTRIES`] entries.
    Structure,
    /// A node holds two properties, or two child nodes, of one name (the specification
    /// forbids both, and a reader would have to guess which one counts).
    Duplicate,
}

impl DtError {
    /// What is wrong, in words, for the boot's one error line.
    pub fn what(&self) -> &'static str {
        match self {
            DtError::Header => "no device tree header (magic 0xd00dfeed)",
            DtError::Size => "the device tree's size is out of range",
            DtError::Blocks => "a device tree block lies outside the tree",
            DtError::Structure => "the device tree's structure is malformed",
            DtError::Duplicate => "a device tree node holds two properties or two nodes of one name",
        }
    }
}

/// The big-endian word at `at` in `b`, if it lies inside.
fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The tree's total size from its header (`head`: at least its first 8 bytes), checked
/// against [`MAX_LEN`]: how many bytes a port must make readable for [`DeviceTree::new`].
pub fn total_len(head: &[u8]) -> Result<usize, DtError> {
    if be32(head, 0) != Some(MAGIC) {
        return Err(DtError::Header);
    }
    let len = be32(head, 4).ok_or(DtError::Header)? as usize;
    if !(HEADER_LEN..=MAX_LEN).contains(&len) {
        return Err(DtError::Size);
    }
    Ok(len)
}

/// An opened, checked device tree.
#[derive(Clone, Copy)]
pub struct DeviceTree<'a> {
    /// The structure block.
    structs: &'a [u8],
    /// The strings block.
    strings: &'a [u8],
}

/// One structure-block token and where the next one starts.
enum Token<'a> {
    Begin(&'a str),
    End,
    Prop(Property<'a>),
    Nop,
    Finish,
}

/// A property: its name and raw value.
#[derive(Clone, Copy)]
pub struct Property<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its value's bytes.
    pub value: &'a [u8],
}

impl<'a> Property<'a> {
    /// The value as one number: one cell (4 bytes) or two (8), big-endian; otherwise `None`.
    pub fn as_usize(&self) -> Option<usize> {
        match self.value.len() {
            4 => self.cells(1),
            8 => self.cells(2),
            _ => None,
        }
        .map(|v| v as usize)
    }

    /// The value as text: one string ending in its NUL; `None` if it is not UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        let text = self.value.strip_suffix(&[0])?;
        core::str::from_utf8(text).ok().filter(|s| !s.contains('\0'))
    }

    /// The first `cells` cells of the value as one number (1 or 2 cells).
    pub fn cells(&self, cells: usize) -> Option<u64> {
        match cells {
            1 => be32(self.value, 0).map(u64::from),
            2 => Some((be32(self.value, 0)? as u64) << 32 | be32(self.value, 4)? as u64),
            _ => None,
        }
    }
}

/// A node: its name (with its unit address, `cpu@0`) and where its body starts.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    tree: DeviceTree<'a>,
    /// Its name.
    pub name: &'a str,
    /// Offset of the first token after its name.
    body: usize,
}

impl<'a> DeviceTree<'a> {
    /// Opens the tree in `blob` (at least its header's total size), checking all of it.
    pub fn new(blob: &'a [u8]) -> Result<DeviceTree<'a>, DtError> {
        let len = total_len(blob)?;
        // (`total_len` accepted no length below the header's.)
        let blob = blob.get(..len).ok_or(DtError::Size)?;
        let word = |i: usize| be32(blob, 4 * i).map(|w| w as usize).ok_or(DtError::Header);
        let (off_struct, off_strings, off_rsvmap) = (word(2)?, word(3)?, word(4)?);
        let (size_strings, size_struct) = (word(8)?, word(9)?);
        let block = |off: usize, size: usize| {
            off.checked_add(size).and_then(|end| blob.get(off..end)).ok_or(DtError::Blocks)
        };
        if off_rsvmap > len || off_struct % 4 != 0 {
            return Err(DtError::Blocks);
        }
        let tree = DeviceTree {
            structs: block(off_struct, size_struct)?,
            strings: block(off_strings, size_strings)?,
        };
        tree.check()?;
        Ok(tree)
    }

    /// The token at `at`, and the offset of the next.
    fn token(&self, at: usize) -> Option<(Token<'a>, usize)> {
        let b = self.structs;
        let next = at.checked_add(4)?;
        match be32(b, at)? {
            BEGIN_NODE => {
                let rest = b.get(next..)?;
                let n = rest.iter().position(|&c| c == 0)?;
                let name = core::str::from_utf8(&rest[..n]).ok()?;
                Some((Token::Begin(name), align4(next + n + 1)?))
            }
            END_NODE => Some((Token::End, next)),
            PROP => {
                let len = be32(b, next)? as usize;
                let name_at = be32(b, next + 4)? as usize;
                let start = next + 8;
                let value = b.get(start..start.checked_add(len)?)?;
                let names = self.strings.get(name_at..)?;
                let n = names.iter().position(|&c| c == 0)?;
                let name = core::str::from_utf8(&names[..n]).ok()?;
                Some((Token::Prop(Property { name, value }), align4(start + len)?))
            }
            NOP => Some((Token::Nop, next)),
            END => Some((Token::Finish, next)),
            _ => None,
        }
    }

    /// Walks the whole structure block once: one root node, nodes nested at most
    /// [`MAX_DEPTH`] deep, then the end token; then no name twice in a node.
    fn check(&self) -> Result<(), DtError> {
        self.check_structure()?;
        match self.root() {
            Some(root) if root.names_unique() => Ok(()),
            Some(_) => Err(DtError::Duplicate),
            None => Err(DtError::Structure),
        }
    }

    /// [`DeviceTree::check`]'s walk of the tokens.
    fn check_structure(&self) -> Result<(), DtError> {
        let (mut at, mut depth, mut roots) = (0, 0usize, 0);
        // The entries of each open node so far, by its depth.
        let mut entries = [0usize; MAX_DEPTH + 1];
        let count = |entries: &mut [usize; MAX_DEPTH + 1], depth: usize| {
            entries[depth] += 1;
            if entries[depth] > MAX_ENTRIES {
                return Err(DtError::Structure);
            }
            Ok(())
        };
        loop {
            let (t, next) = self.token(at).ok_or(DtError::Structure)?;
            match t {
                Token::Begin(_) => {
                    if depth == 0 {
                        roots += 1;
                    } else {
                        count(&mut entries, depth)?;
                    }
                    depth += 1;
                    if depth > MAX_DEPTH || roots > 1 {
                        return Err(DtError::Structure);
                    }
                    entries[depth] = 0;
                }
                Token::End => depth = depth.checked_sub(1).ok_or(DtError::Structure)?,
                Token::Prop(_) if depth == 0 => return Err(DtError::Structure),
                Token::Prop(_) => count(&mut entries, depth)?,
                Token::Nop => {}
                Token::Finish if depth == 0 && roots == 1 => return Ok(()),
                Token::Finish => return Err(DtError::Structure),
            }
            at = next;
        }
    }

    /// The root node.
    pub fn root(&self) -> Option<Node<'a>> {
        let mut at = 0;
        loop {
            match self.token(at)? {
                (Token::Nop, next) => at = next,
                (Token::Begin(name), body) => return Some(Node { tree: *self, name, body }),
                _ => return None,
            }
        }
    }

    /// The node at `path` (`/cpus/cpu-map`); a component without a unit address matches a
    /// node whose name has one (`cpu` matches `cpu@0`), the first such.
    pub fn find(&self, path: &str) -> Option<Node<'a>> {
        let mut node = self.root()?;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            node = node.children().find(|c| c.name == part || c.base_name() == part)?;
        }
        Some(node)
    }
}

impl DeviceTree<'_> {
    /// Whether the `/memory` nodes' `reg` ranges hold all `len` bytes from `base` (the root's
    /// `#address-cells` and `#size-cells`, 2 and 1 where unsaid, each 1 or 2). A range that
    /// cannot be read holds nothing.
    pub fn ram_holds(&self, base: u64, len: u64) -> bool {
        let Some(root) = self.root() else { return false };
        let cells = |name, unsaid| root.property(name).map_or(Some(unsaid), |p| p.as_usize());
        let (Some(ac @ 1..=2), Some(sc @ 1..=2)) = (cells("#address-cells", 2), cells("#size-cells", 1))
        else {
            return false;
        };
        let Some(end) = base.checked_add(len) else { return false };
        let ranges = root.children().filter(|n| n.base_name() == "memory").filter_map(|n| n.property("reg"));
        ranges.flat_map(|reg| reg.value.chunks_exact((ac + sc) * 4)).any(|entry| {
            let (at, size) = entry.split_at(ac * 4);
            let at = Property { name: "reg", value: at }.cells(ac);
            let size = Property { name: "reg", value: size }.cells(sc);
            matches!((at, size), (Some(a), Some(n)) if a <= base && a.checked_add(n).is_some_and(|e| end <= e))
        })
    }
}

/// `at` rounded up to a multiple of 4.
fn align4(at: usize) -> Option<usize> {
    at.checked_add(3).map(|a| a & !3)
}

impl<'a> Node<'a> {
    /// Its name without the unit address (`cpu` for `cpu@0`).
    pub fn base_name(&self) -> &'a str {
        self.name.split('@').next().unwrap_or(self.name)
    }

    /// Its own entries in order (properties, and the names of its child nodes with where
    /// their bodies start), not its children's.
    fn entries(&self) -> impl Iterator<Item = (Token<'a>, usize)> + 'a {
        let tree = self.tree;
        let (mut at, mut depth, mut done) = (self.body, 0usize, false);
        core::iter::from_fn(move || {
            while !done {
                let Some((t, next)) = tree.token(at) else {
                    done = true;
                    break;
                };
                at = next;
                match t {
                    Token::Begin(_) if depth == 0 => {
                        depth = 1;
                        return Some((t, next));
                    }
                    Token::Begin(_) => depth += 1,
                    Token::End if depth == 0 => done = true,
                    Token::End => depth -= 1,
                    Token::Prop(_) if depth == 0 => return Some((t, next)),
                    Token::Finish => done = true,
                    Token::Prop(_) | Token::Nop => {}
                }
            }
            None
        })
    }

    /// Whether it and the nodes below it hold no two properties and no two child nodes of one
    /// name. (Pairwise, without a heap: a node holds at most [`MAX_ENTRIES`], and this runs
    /// once.)
    fn names_unique(&self) -> bool {
        let name = |t: &Token<'a>| match t {
            Token::Begin(n) => Some((true, *n)),
            Token::Prop(p) => Some((false, p.name)),
            _ => None,
        };
        self.entries().enumerate().all(|(i, (t, _))| {
            let me = name(&t);
            !self.entries().take(i).any(|(u, _)| name(&u) == me)
        }) && self.children().all(|c| c.names_unique())
    }

    /// Its properties.
    pub fn properties(&self) -> impl Iterator<Item = Property<'a>> + 'a {
        self.entries().filter_map(|(t, _)| match t {
            Token::Prop(p) => Some(p),
            _ => None,
        })
    }

    /// Its property `name`.
    pub fn property(&self, name: &str) -> Option<Property<'a>> {
        self.properties().find(|p| p.name == name)
    }

    /// Its child nodes.
    pub fn children(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let tree = self.tree;
        self.entries().filter_map(move |(t, body)| match t {
            Token::Begin(name) => Some(Node { tree, name, body }),
            _ => None,
        })
    }
}
