# Sourced by local.sh and hostfile.sh: tessera_mca, the array of "--mca NAME VALUE" for every
# setting of mca-params.conf beside this file.
tessera_mca=()
while read -r line || [ -n "$line" ]; do
  line=${line%%#*}
  [[ "$line" =~ ^[[:space:]]*$ ]] && continue
  if ! [[ "$line" =~ ^[[:space:]]*([A-Za-z0-9_]+)[[:space:]]*=[[:space:]]*([^[:space:]]+)[[:space:]]*$ ]]; then
    echo "mca_flags.sh: not 'name = value' in $(dirname "${BASH_SOURCE[0]}")/mca-params.conf: '$line'" >&2
    exit 2
  fi
  tessera_mca+=(--mca "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
done < "$(dirname "${BASH_SOURCE[0]}")/mca-params.conf"
