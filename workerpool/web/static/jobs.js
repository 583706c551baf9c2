// The jobs list's "select every job shown" box (a file of its own: the page's CSP allows no
// inline script). The table is swapped by htmx when filtering, so the listener is delegated.
document.addEventListener("change", function (event) {
  if (event.target.id !== "select-all") return;
  document.querySelectorAll("input.pick").forEach(function (box) {
    box.checked = event.target.checked;
  });
});
