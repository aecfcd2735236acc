//! JavaScript (React Native) stack restoration: minified bundle positions and Hermes bytecode
//! offsets back to original file, line, column and function.
//!
//! 1. [`stack::parse_stack`] reads a Hermes crash JSON or a text stack (V8/Node, JSC, Hermes);
//! 2. [`sourcemap::JsSourceMap::parse`] prepares a source map of any kind React Native makes
//!    (plain, indexed, RAM bundle, segmented, Metro function maps, Hermes bytecode maps) as
//!    SourceMapCaches, once, each with a per-line index of its mappings
//!    ([`line_index`]), after refusing maps that ECMA-426 calls invalid ([`validate`]);
//! 3. [`restore::restore`] maps every frame, following metro-symbolicate's rules;
//! 4. [`render::metro_text`] prints the result as metro-symbolicate does, for diffing.

mod line_index;
pub mod render;
pub mod restore;
pub mod result;
pub mod sourcemap;
mod sources;
pub mod stack;
mod validate;

pub use restore::{RestoreOptions, restore, restore_frame, restore_with};
pub use result::{JsFrameResult, JsFrameStatus, JsRestoreResult};
pub use sourcemap::{JsSourceMap, MappedLocation, Mapping, SourceMapError};
pub use sources::SourceText;
pub use stack::{JsFrame, JsStack, StackError, parse_stack};
