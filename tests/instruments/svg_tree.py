"""A drawing's SVG read back as XML, for the tests of the drawings: its root, and its shapes of one class."""

import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def parsed(drawing):
    root = ET.fromstring(drawing._repr_svg_())
    assert root.tag == f"{SVG}svg"
    return root


def of_class(root, cls):
    return [e for e in root.iter() if e.get("class") == cls]
