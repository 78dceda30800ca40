//! Typed twins of the Lua scripts: one module per `lua/<op>-<n>.lua`, holding the operation's arguments
//! (serialised in the order of the script's header), its reply, and the `Store` methods that call it.

pub mod fetch;
