// The navigation's dotted names may break after a dot or an underscore and nowhere else:
// a break opportunity (<wbr>) after each, which a copy of the text does not contain.
document.addEventListener("DOMContentLoaded", () => {
  for (const link of document.querySelectorAll(".bd-sidebar-primary .bd-links a")) {
    const walker = document.createTreeWalker(link, NodeFilter.SHOW_TEXT);
    const nodes = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
    for (const node of nodes) {
      const parts = node.data.split(/(?<=[._])/);
      if (parts.length < 2) continue;
      const frag = document.createDocumentFragment();
      parts.forEach((part, i) => {
        if (i) frag.appendChild(document.createElement("wbr"));
        frag.appendChild(document.createTextNode(part));
      });
      node.replaceWith(frag);
    }
  }
});
