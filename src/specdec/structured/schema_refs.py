"""``$ref`` resolution for JSON schemas: base URIs, ``$id``, ``$anchor``, JSON pointers.

Every schema node gets the base URI it sits under (``$id`` changes it for its subtree,
resolved against the enclosing base); a ``$ref`` is resolved against the base of the
node that holds it. A reference to a document outside the schema is looked up through
``retrieve`` (a callable, URI -> schema or None) and never fetched: without one (the
server never passes one), such a reference is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from specdec.structured.errors import ConstraintError, UnsupportedSchemaError

ROOT_URI = "http://specdec.invalid/schema.json"  # the base of a schema without an $id
LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
# Keywords whose value maps names to subschemas (the map itself is not a schema).
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                         "dependentSchemas"})
NOT_SCHEMAS = frozenset({"enum", "const", "examples", "default", "required"})


class SchemaIndex:
    def __init__(self, root: Any, retrieve: Callable[[str], Any] | None = None,
                 ref_overrides_siblings: bool = False):
        self.retrieve = retrieve
        # Draft 7 and earlier: a schema with "$ref" is that reference only ($id included).
        self.ref_overrides_siblings = ref_overrides_siblings
        self.base_of: dict[int, str] = {}  # id(node) -> absolute base URI (no fragment)
        self.resources: dict[str, Any] = {}  # absolute URI -> the node with that $id
        self.anchors: dict[str, Any] = {}  # "URI#name" -> node
        self.dynamic_anchors: dict[str, int] = {}  # $dynamicAnchor name -> schemas with it
        self.static_dynamic: set[str] = set()  # names whose $dynamicRefs were made static
        self.documents: list[Any] = [root]  # keeps retrieved documents (and their ids) alive
        self.resources[ROOT_URI] = root
        self._index(root, ROOT_URI)

    def _index(self, node: Any, base: str) -> None:
        if isinstance(node, list):
            for item in node:
                self._index(item, base)
            return
        if not isinstance(node, dict):
            return
        own_id = node.get("$id")
        if "$ref" in node and self.ref_overrides_siblings:
            own_id = None
        if isinstance(own_id, str):
            uri, fragment = urldefrag(_join(base, own_id))
            if uri:
                base = uri
                self.resources.setdefault(uri, node)
            if fragment and not fragment.startswith("/"):  # draft 7 "#name" anchors
                self.anchors.setdefault(f"{base}#{fragment}", node)
        if isinstance(node.get("$anchor"), str):
            self.anchors.setdefault(f"{base}#{node['$anchor']}", node)
        if isinstance(node.get("$dynamicAnchor"), str):
            name = node["$dynamicAnchor"]
            self.anchors.setdefault(f"{base}#{name}", node)
            self.dynamic_anchors[name] = self.dynamic_anchors.get(name, 0) + 1
        self.base_of[id(node)] = base
        for key, value in node.items():
            if key in NOT_SCHEMAS:
                continue
            if key in SCHEMA_MAPS and isinstance(value, dict):
                for sub in value.values():
                    self._index(sub, base)
            elif isinstance(value, (dict, list)):
                self._index(value, base)

    def resolve(self, ref: Any, holder: Any, where: str) -> Any:
        """The schema ``ref`` (held by the node ``holder``) points to."""
        if not isinstance(ref, str):
            raise ConstraintError(f"$ref at {where} must be a string")
        base = self.base_of.get(id(holder), ROOT_URI)
        uri, fragment = urldefrag(_join(base, ref))
        document = self.resources.get(uri)
        if document is None:
            document = self._retrieve(uri, ref, where)
        if not fragment:
            return document
        if not fragment.startswith("/"):
            if f"{uri}#{fragment}" not in self.anchors:
                raise ConstraintError(f"$ref {ref!r} at {where}: no anchor {fragment!r}")
            return self.anchors[f"{uri}#{fragment}"]
        node = document
        for token in fragment.split("/")[1:]:
            token = unquote(token).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise ConstraintError(f"$ref {ref!r} at {where} points nowhere")
        return node

    def static_dynamic_ref(self, ref: Any, holder: Any, where: str) -> str:
        """The absolute URI a ``$dynamicRef`` always resolves to: its target as a
        ``$ref``, where that has no ``$dynamicAnchor`` of the fragment's name or it is
        the only schema declaring that name (else which one applies depends on the
        dynamic scope: refused)."""
        target = self.resolve(ref, holder, where)
        absolute = _join(self.base_of.get(id(holder), ROOT_URI), ref)
        fragment = urldefrag(absolute)[1]
        if isinstance(target, dict) and fragment and target.get("$dynamicAnchor") == fragment:
            self.static_dynamic.add(fragment)
            self.check_dynamic(where)
        return absolute

    def check_dynamic(self, where: str) -> None:
        """Refuse if a ``$dynamicAnchor`` made static is declared more than once (also
        after documents retrieved later)."""
        for name in self.static_dynamic:
            if self.dynamic_anchors.get(name, 0) > 1:
                raise UnsupportedSchemaError(
                    f"$dynamicRef to {name!r} at {where}: several schemas declare "
                    f"$dynamicAnchor {name!r}; which applies depends on the dynamic scope")

    def _retrieve(self, uri: str, ref: str, where: str) -> Any:
        found = self.retrieve(uri) if self.retrieve is not None else None
        if found is None:
            raise UnsupportedSchemaError(
                f"$ref {ref!r} at {where}: only references within the schema (or to "
                "documents given to the compiler) are supported; nothing is fetched")
        self.documents.append(found)
        self.resources[uri] = found
        self._index(found, uri)
        return found


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base``; a fragment alone also against bases that
    ``urljoin`` leaves alone (``urn:`` URIs)."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


def is_legacy_draft(root: Any, default_draft: str) -> bool:
    """Whether ``root`` follows draft 7 or earlier: by its ``$schema``, else by
    ``default_draft`` ("2020-12", "draft7"...)."""
    declared = root.get("$schema") if isinstance(root, dict) else None
    name = declared if isinstance(declared, str) else default_draft
    return any(d in name.replace("draft7", "draft-07").replace("draft6", "draft-06")
               .replace("draft4", "draft-04") for d in LEGACY_DRAFTS)
