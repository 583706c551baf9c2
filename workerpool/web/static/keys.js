// Keyboard shortcuts of every page (a file of its own: the page's CSP allows no inline script).
// "/" puts the cursor in the header's search box, unless one is typing in a field already.
document.addEventListener("keydown", function (event) {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  var target = event.target;
  var tag = target && target.tagName ? target.tagName.toLowerCase() : "";
  if (tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable) {
    return;
  }
  var box = document.getElementById("search-q");
  if (!box) return;
  event.preventDefault();
  box.focus();
  box.select();
});
